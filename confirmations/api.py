"""The operator REST API for pending confirmations and recovery contracts, mounted at /api/.

What the console's confirmation and contract screens do, for an operator's scripts: list confirmations
and contracts (keyset pages, oldest first, filtered by state), read one (a contract with its state
events and, in RECONCILIATION, what its target looks like now), approve or deny a confirmation, roll a
contract back or resolve its reconciliation. Each view parses, calls the `do_*` function of
`confirmations.services` (which checks the permission, audits and hands the work to the executor) and
serializes; a refusal of those functions (`DecisionRefused`, or the executor's `ExecutionRefused`) goes out as
it is, problem details with its code and status (`forge_core.rest`): 404 unknown, 403 without the
permission (the attempt is audited), 409 already decided, expired, in the wrong state or
(FORGE_ERR_TARGET_DRIFT) a target that changed since, 400 a typed memorable ID that does not match.

Who may call is the operator API's rule (`forge_core.rest.OperatorsOnly`: a console login, with CSRF
on unsafe methods, or an operator token; a client token is refused); the authentication classes come
from settings, so this app never imports an edge. Reading a confirmation expires what is due first.
"""

from __future__ import annotations

import copy
import logging
import uuid
from typing import Any, Literal

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from pydantic import BaseModel, ConfigDict, Field
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from confirmations import executor, sealing
from confirmations.models import (
    ConfirmationState,
    Contract,
    ContractEvent,
    ContractState,
    PendingConfirmation,
)
from confirmations.services import (
    do_approve_confirmation,
    do_deny_confirmation,
    do_resolve_contract,
    do_rollback_contract,
    expire_due,
    is_authentic,
    reconciliation_evidence,
    tampered_refusal,
    visible_to,
)
from forge_core.console import signed_in
from forge_core.errors import AuditUnavailable
from forge_core.rest import (
    BAD_QUERY,
    OPERATOR_REFUSED,
    PAGE_QUERY,
    in_state,
    operator_view,
    page_in_creation_order,
    parsed_body,
    query_parameters,
    refusal,
    state_parameter,
)

log = logging.getLogger(__name__)

LIST_PARAMETERS = frozenset({"state", "after", "limit"})


BODY_REFUSED = {
    400: refusal("The body is not the JSON object documented here, or a typed memorable ID does not match."),
    415: refusal("The body is not sent as application/json."),
    503: refusal("The audit log cannot be written, so nothing was done."),
}


def action_refused(what: str, permission: str) -> dict[int, Any]:
    """The documented refusals of a decision on a confirmation or a contract (`what`)."""
    return {
        **OPERATOR_REFUSED,
        403: refusal(
            f"Not an operator, a client token, a missing or forged CSRF token, or no {permission} permission "
            "(that attempt is audited)."
        ),
        404: refusal(f"There is no {what} with this id."),
        **BODY_REFUSED,
    }


# --- serialized shapes -----------------------------------------------------------------------------


# The fields each confirmation serializer class builds from the model, built once per class (see `get_fields`).
_BUILT_FIELDS: dict[type[serializers.Serializer], dict[str, serializers.Field]] = {}


class ConfirmationRow(serializers.ModelSerializer):
    memorable_id = serializers.CharField(read_only=True, help_text="Four words from the SHA-256 of the id.")
    principal = serializers.CharField(source="principal.get_username", help_text="Who asked: the token's owner.")
    session = serializers.CharField(source="session_id", help_text="The MCP session that asked.")
    decided_by = serializers.SerializerMethodField(help_text="Who approved or denied it, or null.")

    def get_fields(self) -> dict[str, serializers.Field]:
        # A ModelSerializer builds its fields from the model on every instance, more than a millisecond for the
        # detail (most of an approval's answer). They are the same each time: each instance gets copies of the
        # ones built first, as a plain Serializer copies its declared fields.
        built = _BUILT_FIELDS.get(type(self))
        if built is None:
            built = _BUILT_FIELDS[type(self)] = super().get_fields()
        return copy.deepcopy(built)

    class Meta:
        model = PendingConfirmation
        fields = [
            "id",
            "memorable_id",
            "state",
            "tool",
            "label",
            "project",
            "principal",
            "client_label",
            "session",
            "requires_typed_id",
            "created_at",
            "expires_at",
            "decided_by",
            "decided_at",
        ]

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_decided_by(self, confirmation: PendingConfirmation) -> str | None:
        return confirmation.decided_by.get_username() if confirmation.decided_by else None


class ConfirmationDetail(ConfirmationRow):
    contract = serializers.SerializerMethodField(help_text="The contract it was carried out under, or null.")
    authentic = serializers.SerializerMethodField(
        help_text="Whether the record still holds what was sealed when it was made; false means it was edited "
        "outside Forge and cannot be approved (FORGE_ERR_INTEGRITY)."
    )

    class Meta(ConfirmationRow.Meta):
        fields = [
            *ConfirmationRow.Meta.fields,
            "question",
            "options",
            "arguments",
            "arguments_digest",
            "preview",
            "key_memorable_id",
            "capability",
            "method",
            "base_fingerprint",
            "result_digest",
            "authentic",
            "finished_at",
            "outcome",
            "contract",
        ]

    @extend_schema_field(serializers.BooleanField())
    def get_authentic(self, confirmation: PendingConfirmation) -> bool:
        return is_authentic(confirmation)

    @extend_schema_field(serializers.UUIDField(allow_null=True))
    def get_contract(self, confirmation: PendingConfirmation) -> str | None:
        if PendingConfirmation.contract.is_cached(confirmation):  # as an approval carried it out
            return str(confirmation.contract.id)
        contract_id = Contract.objects.filter(confirmation=confirmation).values_list("pk", flat=True).first()
        return str(contract_id) if contract_id else None


class ConfirmationPage(serializers.Serializer):
    confirmations = ConfirmationRow(many=True)
    next = serializers.URLField(allow_null=True, help_text="The URL of the next page, or null on the last one.")


class ContractRow(serializers.ModelSerializer):
    memorable_id = serializers.CharField(read_only=True, help_text="Four words from the SHA-256 of the id.")

    class Meta:
        model = Contract
        fields = [
            "id",
            "memorable_id",
            "state",
            "detail",
            "label",
            "capability",
            "target_kind",
            "method",
            "confirmation",
            "created_at",
            "updated_at",
        ]


class ContractEventRow(serializers.ModelSerializer):
    class Meta:
        model = ContractEvent
        fields = ["version", "from_state", "to_state", "at", "actor", "reason"]


class Evidence(serializers.Serializer):
    current_fingerprint = serializers.CharField(help_text="The target's fingerprint now; empty when unreadable.")
    matches_before = serializers.BooleanField(help_text="It is what it was before the contract ran.")
    matches_result = serializers.BooleanField(help_text="It is the result the contract meant to produce.")
    finding = serializers.ChoiceField(choices=["before", "result", "neither", "unreadable"])
    text = serializers.CharField(help_text="The finding in a sentence.")
    reconciles = serializers.ChoiceField(
        choices=["change", "rollback"], help_text="Whether the change or its rollback was interrupted."
    )
    conclusions = serializers.DictField(
        child=serializers.ChoiceField(choices=ContractState.choices),
        help_text="The state each conclusion (applied, not_applied, rolled_back_by_hand) leads the contract to.",
    )


class ContractDetail(ContractRow):
    events = ContractEventRow(many=True, read_only=True, help_text="Its state transitions, oldest first.")
    evidence = serializers.SerializerMethodField(help_text="In RECONCILIATION: the target now; else null.")

    class Meta(ContractRow.Meta):
        fields = [
            *ContractRow.Meta.fields,
            "operation_id",
            "target_digest",
            "precondition_fingerprint",
            "expected_post_fingerprint",
            "post_fingerprint",
            "intent_digest",
            "snapshot_digest",
            "version",
            "executor",
            "expires_at",
            "events",
            "evidence",
        ]

    @extend_schema_field(Evidence(allow_null=True))
    def get_evidence(self, contract: Contract) -> dict[str, Any] | None:
        return self.context.get("evidence")


class ContractPage(serializers.Serializer):
    contracts = ContractRow(many=True)
    next = serializers.URLField(allow_null=True, help_text="The URL of the next page, or null on the last one.")


class Approval(BaseModel):
    """The body of POST /api/confirmations/{id}/approve (it may be left out when no ID is to be typed)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    typed_id: str = Field(
        default="",
        max_length=200,
        description="The memorable ID, typed, when the confirmation requires it (of its key, if it has one).",
    )


class Denial(BaseModel):
    """The body of POST /api/confirmations/{id}/deny (it may be left out)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    reason: str = Field(default="", max_length=500, description="Why, for the client (optional).")


class Rollback(BaseModel):
    """The body of POST /api/contracts/{id}/rollback."""

    model_config = ConfigDict(extra="forbid", strict=True)

    typed_id: str = Field(max_length=200, description="The contract's memorable ID, typed.")


class Resolution(BaseModel):
    """The body of POST /api/contracts/{id}/resolve."""

    model_config = ConfigDict(extra="forbid", strict=True)

    conclusion: Literal["applied", "not_applied", "rolled_back_by_hand"] = Field(
        description="What the operator found: the change is in the target (VERIFIED), it is not (FAILED), or "
        "someone restored the target by hand (ROLLED_BACK). For an interrupted rollback (evidence.reconciles "
        "is rollback), applied means the rollback took effect (ROLLED_BACK) and not_applied that it did not "
        "(back to VERIFIED); evidence.conclusions says where each leads."
    )


# --- views -----------------------------------------------------------------------------------------


def _state_query(states: list[str], what: str) -> list[OpenApiParameter]:
    return [
        state_parameter(states, what),
        OpenApiParameter("after", OpenApiTypes.UUID, description=f"The id of the last of the {what} already read."),
        *PAGE_QUERY,
    ]


@extend_schema(
    operation_id="confirmations_list",
    summary="Pending confirmations",
    description="Confirmations in the order they were asked for, optionally in one state (those past their "
    "time are expired first); `next` is the URL of the following page, or null.",
    parameters=_state_query(ConfirmationState.values, "confirmations"),
    responses={200: ConfirmationPage, **BAD_QUERY, **OPERATOR_REFUSED},
)
@operator_view("GET")
def confirmations(request: Request) -> Response:
    params = query_parameters(request, LIST_PARAMETERS)
    found = visible_to(request.user).filter(**in_state(params, ConfirmationState.values))
    _expire_due()
    page, following = page_in_creation_order(
        request, found.select_related("principal", "decided_by"), params, what="a confirmation"
    )
    return Response({"confirmations": ConfirmationRow(page, many=True).data, "next": following})


@extend_schema(
    summary="A confirmation",
    description="One confirmation with its question, arguments, preview and, once decided, its outcome.",
    responses={200: ConfirmationDetail, **OPERATOR_REFUSED, 404: refusal("There is no such confirmation.")},
)
@operator_view("GET")
def confirmation(request: Request, confirmation_id: uuid.UUID) -> Response:
    query_parameters(request, frozenset())
    _expire_due()
    return Response(ConfirmationDetail(_confirmation(request, confirmation_id)).data)


CONFIRMATION_DECIDED = {
    200: ConfirmationDetail,
    **action_refused("confirmation", "decide_confirmation"),
    409: refusal("The confirmation was decided already or expired; nothing was changed."),
}


@extend_schema(
    summary="Approve a confirmation",
    description="Approve a pending confirmation and carry it out at once; the answer is the confirmation "
    "afterwards, executed (its outcome names the contract) or failed (its outcome says why). A confirmation "
    "that requires it needs the memorable ID typed. Audited with the operator.",
    request=Approval,
    responses=CONFIRMATION_DECIDED,
)
@operator_view("POST", json_body=True)
def approve(request: Request, confirmation_id: uuid.UUID) -> Response:
    body = parsed_body(Approval, request.data, send='a JSON object {"typed_id": "word-word-word-word"}, or no body,')
    decided = do_approve_confirmation(confirmation_id, acting_user=signed_in(request.user), typed_id=body.typed_id)
    return Response(ConfirmationDetail(decided).data)


@extend_schema(
    summary="Deny a confirmation",
    description="Deny a pending confirmation: nothing is written and the client is told. Audited with the operator.",
    request=Denial,
    responses=CONFIRMATION_DECIDED,
)
@operator_view("POST", json_body=True)
def deny(request: Request, confirmation_id: uuid.UUID) -> Response:
    body = parsed_body(Denial, request.data, send='a JSON object {"reason": "..."}, or no body,')
    decided = do_deny_confirmation(confirmation_id, acting_user=signed_in(request.user), reason=body.reason)
    return Response(ConfirmationDetail(decided).data)


@extend_schema(
    operation_id="contracts_list",
    summary="Recovery contracts",
    description="Contracts in the order they were recorded, optionally in one state; `next` is the URL of the "
    "following page, or null.",
    parameters=_state_query(ContractState.values, "contracts"),
    responses={200: ContractPage, **BAD_QUERY, **OPERATOR_REFUSED},
)
@operator_view("GET")
def contracts(request: Request) -> Response:
    params = query_parameters(request, LIST_PARAMETERS)
    found = Contract.objects.filter(**in_state(params, ContractState.values))
    page, following = page_in_creation_order(request, found, params, what="a contract")
    return Response({"contracts": ContractRow(page, many=True).data, "next": following})


CONTRACT_UNREADABLE = {
    404: refusal("There is no such contract."),
    409: refusal(
        "The contract's record does not authenticate (FORGE_ERR_CONTRACT_TAMPERED): it was changed outside Forge."
    ),
}


@extend_schema(
    summary="A recovery contract",
    description="One contract with its state events and, in RECONCILIATION, what its target looks like now next "
    "to the fingerprints it recorded (the evidence for a conclusion).",
    responses={200: ContractDetail, **OPERATOR_REFUSED, **CONTRACT_UNREADABLE},
)
@operator_view("GET")
def contract(request: Request, contract_id: uuid.UUID) -> Response:
    query_parameters(request, frozenset())
    try:
        found = executor.load(contract_id)
        evidence = reconciliation_evidence(found) if found.state == ContractState.RECONCILIATION else None
    except Contract.DoesNotExist:
        raise _no_such("contract") from None
    except sealing.ContractTampered as exc:
        raise tampered_refusal(exc) from None
    except executor.ExecutionRefused as exc:
        log.warning("contract %s: its target could not be compared (%s)", contract_id, exc.reason)
        evidence = None
    return Response(_contract_body(found, evidence))


@extend_schema(
    summary="Roll a contract back",
    description="Restore the target of a VERIFIED contract as it was before, after typing the contract's "
    "memorable ID. Refused with FORGE_ERR_TARGET_DRIFT (409) when the target changed since the contract was "
    "carried out. The answer is the contract afterwards: ROLLED_BACK, or ROLLBACK_FAILED / RECONCILIATION "
    "when the rollback went wrong midway. Audited with the operator.",
    request=Rollback,
    responses={
        200: ContractDetail,
        **action_refused("contract", "resolve_contract"),
        409: refusal(
            "The contract is not VERIFIED, its record does not authenticate, or its target changed since "
            "(FORGE_ERR_TARGET_DRIFT); nothing was changed."
        ),
    },
)
@operator_view("POST", json_body=True)
def rollback(request: Request, contract_id: uuid.UUID) -> Response:
    body = parsed_body(Rollback, request.data, send='a JSON object {"typed_id": "word-word-word-word"}')
    done = do_rollback_contract(contract_id, acting_user=signed_in(request.user), typed_id=body.typed_id)
    return Response(_contract_body(done, None))


@extend_schema(
    summary="Resolve a reconciliation",
    description="Conclude what happened to a contract in RECONCILIATION: applied, not_applied or "
    "rolled_back_by_hand (GET the contract: evidence.conclusions says which state each leads to); its target "
    "is released. Audited with the operator.",
    request=Resolution,
    responses={
        200: ContractDetail,
        **action_refused("contract", "resolve_contract"),
        409: refusal("The contract is not in RECONCILIATION, or its record does not authenticate."),
    },
)
@operator_view("POST", json_body=True)
def resolve(request: Request, contract_id: uuid.UUID) -> Response:
    body = parsed_body(
        Resolution,
        request.data,
        send='a JSON object {"conclusion": "applied"}, "not_applied" or "rolled_back_by_hand"',
    )
    done = do_resolve_contract(contract_id, acting_user=signed_in(request.user), conclusion=body.conclusion)
    return Response(_contract_body(done, None))


# --- fetching --------------------------------------------------------------------------------------


def _no_such(what: str) -> NotFound:
    return NotFound(f"There is no {what} with this id; GET /api/{what}s lists them.", code="not_found")


def _confirmation(request: Request, confirmation_id: uuid.UUID) -> PendingConfirmation:
    """The confirmation if the caller may see it (its project); "not found" alike for one it may not."""
    query = visible_to(request.user).select_related("principal", "decided_by")
    found = query.filter(pk=confirmation_id).first()
    if found is None:
        raise _no_such("confirmation")
    return found


def _contract_body(found: Contract, evidence: dict[str, Any] | None) -> dict[str, Any]:
    return ContractDetail(found, context={"evidence": evidence}).data


def _expire_due() -> None:
    try:
        expire_due()
    except AuditUnavailable:
        # The answer still shows what is stored; the expiry sweep will try again.
        log.exception("expiring due confirmations: the audit row could not be written")
