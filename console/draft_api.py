"""The operator REST API for working drafts, mounted at /api/ (DESIGN sections 8.1 and 14).

What the console's working-draft screens do, for an operator's scripts: list the drafts waiting for
review (keyset pages by project slug), read one (its revisions, the diff of the file it would write, what
it adds, changes and removes, and its live change groups with their provenance and findings), and accept
it all or discard it. Each decision carries the `working_revision` the operator reviewed, so what is
decided is what was read. Each view parses, calls `console.acceptance` and serializes; a refusal is a
`{"code", "detail"}` body: 404 unknown project (or one the operator may not view), 403 without
approve_change on the project (audited), 409 when the draft moved since the review
(FORGE_ERR_STALE_REVISION), the accepted file changed since (FORGE_ERR_TARGET_DRIFT), another contract
holds the file (FORGE_ERR_TARGET_BUSY), the draft changes nothing (FORGE_ERR_NOTHING_TO_ACCEPT), or the
write's outcome awaits reconciliation (FORGE_ERR_RECONCILIATION). Nothing is written on any refusal.

Who may call is the operator API's rule (`forge_core.rest.OperatorsOnly`): a console login with CSRF, or
an operator token; a client token is refused.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from pydantic import BaseModel, ConfigDict, Field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from console.acceptance import (
    DraftDecisionRefused,
    DraftReview,
    DraftRow,
    do_accept_draft,
    do_discard_draft,
    review,
    reviewable,
    rows,
    waiting,
)
from forge_core.rest import (
    BAD_QUERY,
    OPERATOR_REFUSED,
    PAGE_QUERY,
    next_page_url,
    operator_view,
    page_size,
    parsed_body,
    query_parameters,
    refusal,
)
from projects.services import ProjectUnavailable

NOT_VISIBLE = {404: refusal("There is no project with this slug that the operator may view.")}
DECISION_REFUSED = {
    **OPERATOR_REFUSED,
    400: refusal('The body is not {"working_revision": n}.'),
    403: refusal(
        "Not an operator, a client token, a missing or forged CSRF token, or no approve_change permission on the "
        "project (that attempt is audited)."
    ),
    **NOT_VISIBLE,
    415: refusal("The body is not sent as application/json."),
    503: refusal("The audit log cannot be written, so nothing was done."),
}


# --- serialized shapes -----------------------------------------------------------------------------


class DraftListRow(serializers.Serializer):
    project = serializers.CharField(source="project.slug", help_text="The project's slug.")
    name = serializers.CharField(source="project.name")
    accepted_revision = serializers.IntegerField(help_text="The accepted revision the draft builds on.")
    working_revision = serializers.IntegerField(help_text="Send it back to accept or discard this draft.")
    groups = serializers.IntegerField(help_text="Live change groups.")
    operations = serializers.IntegerField(help_text="Their staged operations.")
    conflicts = serializers.IntegerField(help_text="Operations that no longer apply to the accepted file.")
    changed = serializers.BooleanField(help_text="Whether accepting would change the file.")
    updated_at = serializers.DateTimeField()
    unavailable = serializers.CharField(help_text="Why the project's file cannot be read now; empty when it can.")


class DraftPage(serializers.Serializer):
    drafts = DraftListRow(many=True)
    next = serializers.URLField(allow_null=True, help_text="The URL of the next page, or null on the last one.")


class Finding(serializers.Serializer):
    code = serializers.CharField(help_text="conflict: an operation of the group no longer applies.")
    severity = serializers.ChoiceField(choices=["problem", "advisory"])
    element_id = serializers.CharField()
    message = serializers.CharField()
    body = serializers.CharField(
        required=False,
        help_text='For a finding in ST code: which text of the POU ("body", "action/<name>", "transition/<name>", '
        '"sfc_action/<n>", "sfc_condition/<n>").',
    )
    line = serializers.IntegerField(required=False, help_text="For a finding in ST code: its line there, from 1.")
    column = serializers.IntegerField(required=False, help_text="For a finding in ST code: its column, from 1.")
    excerpt = serializers.CharField(required=False, help_text="For an ST syntax finding: the code around it.")


class ChangedElement(serializers.Serializer):
    element_id = serializers.CharField()
    # A field named fields: the stubs see it replace Serializer.fields, but the serializer metaclass takes
    # declared fields off the class, so Serializer.fields is untouched at run time; the name is the API's.
    fields = serializers.DictField(  # type: ignore[assignment]
        help_text='Each field that differs: {"accepted": ..., "draft": ...}, or "changed".'
    )


class Described(serializers.Serializer):
    added = serializers.ListField(child=serializers.CharField(), help_text="Element ids the draft adds.")
    removed = serializers.ListField(child=serializers.CharField(), help_text="Element ids the draft removes.")
    changed = ChangedElement(many=True, help_text="Elements the draft changes, with the fields that differ.")
    truncated = serializers.BooleanField(help_text="True when a list was cut (the diff still shows the file).")


class GroupRow(serializers.Serializer):
    group_id = serializers.UUIDField()
    title = serializers.CharField()
    rationale = serializers.CharField(allow_blank=True)
    author = serializers.CharField(help_text="The owner of the client token that began it.")
    client_label = serializers.CharField(allow_blank=True, help_text="The label of that token.")
    session = serializers.CharField(help_text="The MCP session that owns it.")
    state = serializers.ChoiceField(choices=["building", "submitted", "closed"])
    operations = serializers.IntegerField()
    findings = Finding(many=True, help_text="Against the elements it changes: conflicts first, then problems.")
    acknowledged_findings = Finding(many=True, help_text="The problems its author submitted it with.")
    created_at = serializers.DateTimeField()


class DraftDetail(serializers.Serializer):
    project = serializers.CharField(source="project.slug")
    name = serializers.CharField(source="project.name")
    path = serializers.CharField(source="project.path", help_text="The project file, under the projects root.")
    accepted_revision = serializers.IntegerField(help_text="The accepted revision the draft builds on.")
    working_revision = serializers.IntegerField(help_text="Send it back to accept or discard this draft.")
    changed = serializers.BooleanField(help_text="Whether accepting would change the file.")
    conflicts = serializers.IntegerField(help_text="Operations left out on accepting: they no longer apply.")
    operations = serializers.IntegerField()
    diff = serializers.CharField(allow_blank=True, help_text="A unified diff of the accepted file against the draft.")
    diff_truncated = serializers.BooleanField()
    describe = Described(source="described")
    groups = GroupRow(many=True)
    updated_at = serializers.DateTimeField()
    draft_digest = serializers.CharField(
        help_text="The SHA-256 of the file accepting would write; send it back with working_revision to accept."
    )


class DraftAccepted(serializers.Serializer):
    project = serializers.CharField()
    contract = serializers.UUIDField(source="contract.pk", help_text="The recovery contract that wrote the file.")
    contract_memorable_id = serializers.CharField(source="contract.memorable_id")
    accepted_revision = serializers.IntegerField(help_text="The project's accepted revision now.")
    working_revision = serializers.IntegerField(help_text="The draft's, after the accepted groups left it.")
    groups = serializers.IntegerField(help_text="Change groups accepted.")
    operations = serializers.IntegerField(help_text="Operations written.")
    skipped_conflicts = serializers.IntegerField(help_text="Operations left out: they no longer applied.")


class DraftDiscarded(serializers.Serializer):
    project = serializers.CharField()
    groups = serializers.IntegerField(help_text="Change groups discarded.")
    working_revision = serializers.IntegerField(help_text="The draft's, after the discard.")


class Reviewed(BaseModel):
    """The body of POST /api/drafts/{slug}/accept and /discard."""

    model_config = ConfigDict(extra="forbid", strict=True)

    working_revision: int = Field(ge=0, description="The draft's working_revision as the operator reviewed it.")


class ReviewedForAcceptance(Reviewed):
    """The body of POST /api/drafts/{slug}/accept: the revision and the file that were reviewed."""

    draft_digest: str = Field(
        pattern="^[0-9a-f]{64}$",
        description="The draft's draft_digest as the operator reviewed it: the SHA-256 of the file accepting writes.",
    )


# --- views -----------------------------------------------------------------------------------------


@extend_schema(
    operation_id="drafts_list",
    summary="Working drafts waiting for review",
    description="The projects whose working draft holds operations of live change groups, in slug order; "
    "`next` is the URL of the following page, or null.",
    parameters=[
        OpenApiParameter("after", OpenApiTypes.STR, description="The slug of the last project already read."),
        *PAGE_QUERY,
    ],
    responses={200: DraftPage, **BAD_QUERY, **OPERATOR_REFUSED},
)
@operator_view("GET")
def drafts(request: Request) -> Response:
    params = query_parameters(request, frozenset({"after", "limit"}))
    limit = page_size(params)
    found = waiting(request.user)
    if "after" in params:
        found = found.filter(project__slug__gt=params["after"])
    page = list(found[: limit + 1])
    following = next_page_url(request, "after", page[limit - 1].project.slug) if len(page) > limit else None
    listed: list[DraftRow] = rows(page[:limit])
    return Response({"drafts": DraftListRow(listed, many=True).data, "next": following})


@extend_schema(
    summary="A working draft",
    description="One project's working draft as a reviewer reads it: its revisions, the diff of the accepted file "
    "against it, the elements it adds, changes and removes, and its live change groups with who began them, why, "
    "and the findings against them (conflicts first).",
    responses={
        200: DraftDetail,
        **OPERATOR_REFUSED,
        **NOT_VISIBLE,
        409: refusal("The project's file cannot be read now (FORGE_ERR_PROJECT_UNAVAILABLE)."),
    },
)
@operator_view("GET")
def draft(request: Request, slug: str) -> Response:
    query_parameters(request, frozenset())
    project = reviewable(request.user, slug)
    try:
        found: DraftReview = review(project)
    except ProjectUnavailable as exc:
        raise DraftDecisionRefused("project_unavailable", str(exc)) from None
    return Response(DraftDetail(found).data)


@extend_schema(
    summary="Accept a working draft",
    description="Accept the whole draft, as reviewed at `working_revision` with the file whose SHA-256 is "
    "`draft_digest`: one recovery contract writes exactly that file to the project (one atomic replace) and its "
    "change groups become accepted, audited with every group's provenance. Conflicting operations are left out.",
    request=ReviewedForAcceptance,
    responses={
        200: DraftAccepted,
        **DECISION_REFUSED,
        409: refusal(
            "Nothing was written: the draft moved since the review (FORGE_ERR_STALE_REVISION), the accepted file "
            "changed (FORGE_ERR_TARGET_DRIFT), another contract holds it (FORGE_ERR_TARGET_BUSY), the draft changes "
            "nothing (FORGE_ERR_NOTHING_TO_ACCEPT), its operations no longer produce the reviewed file "
            "(FORGE_ERR_INTEGRITY), or the write's outcome awaits reconciliation "
            "(FORGE_ERR_RECONCILIATION)."
        ),
    },
)
@operator_view("POST", json_body=True)
def accept(request: Request, slug: str) -> Response:
    project = reviewable(request.user, slug)
    body = parsed_body(
        ReviewedForAcceptance,
        request.data,
        send='a JSON object {"working_revision": n, "draft_digest": "<sha256 hex>"} (both from GET /api/drafts/<slug>)',
    )
    done = do_accept_draft(
        project, acting_user=request.user, working_revision=body.working_revision, draft_digest=body.draft_digest
    )
    return Response(DraftAccepted(done).data)


@extend_schema(
    summary="Discard a working draft",
    description="Discard every live change group of the draft, as reviewed at `working_revision`; the project file "
    "is not touched. Audited with every group's provenance.",
    request=Reviewed,
    responses={
        200: DraftDiscarded,
        **DECISION_REFUSED,
        409: refusal(
            "Nothing was changed: the draft moved since the review (FORGE_ERR_STALE_REVISION, or "
            "FORGE_ERR_TARGET_DRIFT when the accepted file changed), or it has no change groups "
            "(FORGE_ERR_NOTHING_TO_DISCARD)."
        ),
    },
)
@operator_view("POST", json_body=True)
def discard(request: Request, slug: str) -> Response:
    project = reviewable(request.user, slug)
    body = parsed_body(Reviewed, request.data, send='a JSON object {"working_revision": n}')
    done = do_discard_draft(project, acting_user=request.user, working_revision=body.working_revision)
    return Response(DraftDiscarded(done).data)
