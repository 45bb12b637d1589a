"""Registering projects (projects.services): import and bind of every fixture, the refusals and what they
leave behind (nothing), paths that escape the projects root, external changes found on the next read, and
export of an unchanged file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from audit.models import AuditEvent, EventKind
from projects import reads, services
from projects.files import FileChanged, PathOutsideRoot
from projects.models import Project
from projects.services import ProjectRefused, do_bind_project, do_import_project, export_bytes
from tests.projects.conftest import INVALID, MAIN, SMALL, fixture_bytes, fixture_params

pytestmark = pytest.mark.django_db

STEPS = MAIN
# The first schema error libxml2 reports for the invalid fixture (its fileHeader, line 8 of the file).
FIRST_SCHEMA_ERROR = (
    "line 8: Element '{http://www.plcopen.org/xml/tc6_0201}fileHeader', attribute 'creationDateTime': "
    "'2011-04-18 07:45:10' is not a valid value of the atomic type 'xs:dateTime'."
)
SECRET = "forge-xxe-canary-7d1f"


@pytest.fixture(autouse=True)
def _projects_root(root: Path) -> Path:
    return root


def import_fixture(name: str = STEPS, slug: str = "steps") -> Project:
    return do_import_project(fixture_bytes(name), slug=slug, acting_user="tests")


def registered_events() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=EventKind.PROJECT_REGISTERED))


def files_under(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if path.is_file() or path.is_symlink())


def assert_nothing_registered(root: Path) -> None:
    assert files_under(root) == []
    assert not Project.objects.exists()
    assert registered_events() == []


# --- import ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", fixture_params(valid_only=True))
def test_importing_a_valid_fixture_writes_slug_xml_under_the_root_with_identical_bytes(root, fixture):
    do_import_project(fixture.read_bytes(), slug="plant", acting_user="tests")

    assert files_under(root) == [root / "plant.xml"]
    assert (root / "plant.xml").read_bytes() == fixture.read_bytes()


@pytest.mark.parametrize("fixture", fixture_params(valid_only=True))
def test_importing_a_valid_fixture_registers_it_at_revision_1_with_the_files_fingerprint(fixture):
    do_import_project(fixture.read_bytes(), slug="plant", acting_user="tests")

    project = Project.objects.get()
    assert project.slug == "plant"
    assert project.path == "plant.xml"
    assert project.accepted_revision == 1
    assert project.fingerprint == hashlib.sha256(fixture.read_bytes()).hexdigest()


@pytest.mark.parametrize("fixture", fixture_params(valid_only=True))
def test_importing_a_valid_fixture_writes_one_project_registered_audit_row(fixture):
    do_import_project(fixture.read_bytes(), slug="plant", acting_user="olivia")

    [event] = registered_events()
    assert event.project == "plant"
    assert event.called_by == "olivia"
    assert event.outcome == "registered"
    assert event.arguments == {
        "how": "import",
        "path": "plant.xml",
        "fingerprint": hashlib.sha256(fixture.read_bytes()).hexdigest(),
    }


def test_an_imported_project_is_named_after_its_content_header_by_default():
    assert import_fixture().name == "Dosing Line"


def test_an_imported_iso_8859_1_project_is_named_after_its_decoded_content_header():
    assert import_fixture("signal_tower.xml", slug="tower").name == "Signalsäule Halle 2"


def test_an_imported_project_takes_the_name_it_is_given():
    project = do_import_project(fixture_bytes(STEPS), slug="steps", name="Line 3 press", acting_user="tests")

    assert project.name == "Line 3 press"


def test_importing_a_schema_invalid_file_is_refused_naming_the_line_and_the_schema_message():
    with pytest.raises(ProjectRefused) as refused:
        do_import_project(fixture_bytes(INVALID), slug="checker", acting_user="tests")

    assert FIRST_SCHEMA_ERROR in str(refused.value)
    assert "(and 22 more)" in str(refused.value)


def test_a_refused_schema_invalid_import_writes_and_registers_nothing(root):
    with pytest.raises(ProjectRefused):
        do_import_project(fixture_bytes(INVALID), slug="checker", acting_user="tests")

    assert_nothing_registered(root)


@pytest.fixture
def secret_file(tmp_path) -> Path:
    """A local file, outside the projects root, that an XXE attempt tries to read into the project."""
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    return secret


def _xxe_project(secret_file: Path) -> bytes:
    # A valid project apart from the DOCTYPE, whose external entity would pull a local file into a
    # POU's documentation (a place where any text is schema-valid).
    project = fixture_bytes(STEPS).decode()
    declaration, _, rest = project.partition("?>")
    doctype = f'<!DOCTYPE project [<!ENTITY canary SYSTEM "file://{secret_file}">]>'
    documentation = "<xhtml:p><![CDATA[Доля заполнения бутылки: от нуля (пусто) до единицы (полно).]]></xhtml:p>"
    assert documentation in rest
    return f"{declaration}?>{doctype}{rest.replace(documentation, '<xhtml:p>&canary;</xhtml:p>', 1)}".encode()


NOT_PLCOPEN = {
    "tc6-2.0-namespace": (
        lambda _secret_file: fixture_bytes(STEPS).replace(
            b"http://www.plcopen.org/xml/tc6_0201", b"http://www.plcopen.org/xml/tc6_0200"
        ),
        "PLCopen TC6 XML 2.0",
    ),
    "plain-text": (lambda _secret_file: b"Program Main\n  Counter := Counter + 1;\n", "not well-formed XML"),
    "other-root": (
        lambda _secret_file: b'<?xml version="1.0"?><catalog><book/></catalog>',
        "not a PLCopen TC6 XML 2.01 <project>",
    ),
    "doctype-with-external-entity": (_xxe_project, "DOCTYPE"),
    "utf-16": (lambda _secret_file: fixture_bytes(STEPS).decode().encode("utf-16"), "UTF-16"),
    "empty": (lambda _secret_file: b"", "not well-formed XML"),
}


@pytest.mark.parametrize(("build", "reason"), list(NOT_PLCOPEN.values()), ids=list(NOT_PLCOPEN))
def test_importing_a_file_that_is_not_a_tc6_2_01_project_is_refused_with_the_reason(secret_file, build, reason):
    with pytest.raises(ProjectRefused) as refused:
        do_import_project(build(secret_file), slug="other", acting_user="tests")

    assert str(refused.value).startswith("not a PLCopen TC6 2.01 project: ")
    assert reason in str(refused.value)


@pytest.mark.parametrize(("build", "reason"), list(NOT_PLCOPEN.values()), ids=list(NOT_PLCOPEN))
def test_a_refused_non_plcopen_import_writes_and_registers_nothing(root, secret_file, build, reason):
    with pytest.raises(ProjectRefused):
        do_import_project(build(secret_file), slug="other", acting_user="tests")

    assert_nothing_registered(root)


def test_an_xxe_attempt_does_not_leak_the_entitys_file_into_the_refusal(secret_file):
    with pytest.raises(ProjectRefused) as refused:
        do_import_project(_xxe_project(secret_file), slug="other", acting_user="tests")

    assert SECRET not in str(refused.value)


def test_importing_under_a_slug_that_is_taken_is_refused():
    import_fixture(STEPS, slug="line")

    with pytest.raises(ProjectRefused, match="a project with the slug 'line' exists already"):
        import_fixture(SMALL, slug="line")


def test_a_refused_duplicate_slug_import_leaves_the_first_project_and_its_file_alone(root):
    first = import_fixture(STEPS, slug="line")

    with pytest.raises(ProjectRefused):
        import_fixture(SMALL, slug="line")

    assert list(Project.objects.all()) == [first]
    assert (root / "line.xml").read_bytes() == fixture_bytes(STEPS)
    assert len(registered_events()) == 1


def test_importing_over_an_unregistered_file_of_the_same_name_is_refused_and_keeps_that_file(root):
    (root / "line.xml").write_bytes(b"someone else's file")

    with pytest.raises(ProjectRefused, match="exists already; bind it instead"):
        import_fixture(STEPS, slug="line")

    assert (root / "line.xml").read_bytes() == b"someone else's file"
    assert not Project.objects.exists()


@pytest.mark.parametrize("slug", ["line3/press", "Line 3 press", "", "line3.xml"])
def test_importing_under_a_slug_that_is_not_a_slug_is_refused_and_writes_nothing(root, slug):
    # The slug names the project in URLs, tool arguments and the file name: letters, digits, - and _.
    with pytest.raises(ProjectRefused):
        do_import_project(fixture_bytes(STEPS), slug=slug, acting_user="tests")

    assert_nothing_registered(root)


# --- bind ------------------------------------------------------------------------------------------


def place(root: Path, relative: str, name: str = STEPS) -> Path:
    target = root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(fixture_bytes(name))
    return target


@pytest.mark.parametrize("as_given", ["relative", "absolute"])
def test_binding_a_file_inside_the_root_registers_it_where_it_lies(root, as_given):
    target = place(root, "line3/press.xml")

    project = do_bind_project(
        "line3/press.xml" if as_given == "relative" else target, slug="press", acting_user="tests"
    )

    assert project.path == "line3/press.xml"
    assert project.accepted_revision == 1
    assert project.fingerprint == hashlib.sha256(fixture_bytes(STEPS)).hexdigest()


def test_binding_leaves_the_file_in_place_unchanged_and_copies_nothing(root):
    target = place(root, "line3/press.xml")

    do_bind_project("line3/press.xml", slug="press", acting_user="tests")

    assert files_under(root) == [target]
    assert target.read_bytes() == fixture_bytes(STEPS)


def test_binding_writes_a_project_registered_audit_row_saying_bind(root):
    place(root, "line3/press.xml")

    do_bind_project("line3/press.xml", slug="press", acting_user="olivia")

    [event] = registered_events()
    assert event.project == "press"
    assert event.called_by == "olivia"
    assert event.arguments == {
        "how": "bind",
        "path": "line3/press.xml",
        "fingerprint": hashlib.sha256(fixture_bytes(STEPS)).hexdigest(),
    }


def test_binding_a_schema_invalid_file_is_refused_naming_the_line(root):
    place(root, "checker.xml", INVALID)

    with pytest.raises(ProjectRefused) as refused:
        do_bind_project("checker.xml", slug="checker", acting_user="tests")

    assert FIRST_SCHEMA_ERROR in str(refused.value)
    assert not Project.objects.exists()


def test_binding_a_file_that_is_registered_already_is_refused(root):
    place(root, "press.xml")
    do_bind_project("press.xml", slug="press", acting_user="tests")

    with pytest.raises(ProjectRefused, match="is registered already"):
        do_bind_project("press.xml", slug="press-again", acting_user="tests")

    assert Project.objects.count() == 1


def test_binding_a_missing_file_is_refused_saying_it_cannot_be_read(root):
    with pytest.raises(ProjectRefused) as refused:
        do_bind_project("missing.xml", slug="missing", acting_user="tests")

    assert str(refused.value) == f"cannot read {root / 'missing.xml'}: No such file or directory"


def test_binding_an_absolute_path_outside_the_root_is_refused(root, tmp_path):
    outside = place(tmp_path / "elsewhere", "press.xml")

    with pytest.raises(PathOutsideRoot, match="is not inside the projects root"):
        do_bind_project(outside, slug="press", acting_user="tests")

    assert not Project.objects.exists()


def test_binding_a_relative_path_that_climbs_out_of_the_root_is_refused(root, tmp_path):
    place(tmp_path, "x.xml")

    with pytest.raises(PathOutsideRoot, match="is not inside the projects root"):
        do_bind_project("../x.xml", slug="press", acting_user="tests")

    assert not Project.objects.exists()


def test_binding_a_symlink_inside_the_root_that_points_outside_is_refused(root, tmp_path):
    outside = place(tmp_path / "elsewhere", "press.xml")
    (root / "press.xml").symlink_to(outside)

    with pytest.raises(PathOutsideRoot, match="is not inside the projects root"):
        do_bind_project("press.xml", slug="press", acting_user="tests")

    assert not Project.objects.exists()
    assert registered_events() == []


# --- external changes ------------------------------------------------------------------------------


def change_on_disk(root: Path, project: Project) -> bytes:
    """Edit the file as another tool would: still a valid project, different bytes."""
    path = root / project.path
    changed = path.read_bytes().replace(b'name="Dosing Line"', b'name="Dosing Line, edited"', 1)
    assert changed != path.read_bytes()
    path.write_bytes(changed)
    return changed


def external_changes() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=EventKind.EXTERNAL_CHANGE))


def test_a_read_after_the_file_changed_on_disk_reports_accepted_revision_2(root):
    project = import_fixture()
    change_on_disk(root, project)

    answer = reads.overview(project)

    assert answer["accepted_revision"] == 2
    assert answer["name"] == "Dosing Line, edited"


def test_an_external_change_is_stored_as_the_new_accepted_revision_and_fingerprint(root):
    project = import_fixture()
    changed = change_on_disk(root, project)

    reads.overview(project)

    project.refresh_from_db()
    assert project.accepted_revision == 2
    assert project.fingerprint == hashlib.sha256(changed).hexdigest()


def test_an_external_change_writes_an_external_change_audit_row(root):
    project = import_fixture()
    previous = project.fingerprint
    changed = change_on_disk(root, project)

    reads.overview(project)

    [event] = external_changes()
    assert event.project == "steps"
    assert event.called_by == "file"
    assert event.arguments == {"previous": previous, "fingerprint": hashlib.sha256(changed).hexdigest(), "revision": 2}


def test_an_external_change_is_counted_once_however_often_it_is_read(root):
    project = import_fixture()
    change_on_disk(root, project)

    reads.overview(project)
    answer = reads.overview(project)  # the caller's stale object still has the old fingerprint

    assert answer["accepted_revision"] == 2
    assert len(external_changes()) == 1


def test_a_read_of_an_unchanged_file_keeps_revision_1_and_writes_no_audit_row():
    project = import_fixture()

    answer = reads.overview(project)

    assert answer["accepted_revision"] == 1
    assert external_changes() == []


# --- a settled file's status stands for its bytes ---------------------------------------------------


@pytest.fixture
def settled(monkeypatch) -> None:
    """Every file counts as settled however recently it changed, so that a test need not wait SETTLED_NS."""
    monkeypatch.setattr(services, "SETTLED_NS", 0)


def test_a_file_unchanged_since_it_was_hashed_is_not_read_again(settled):
    project = import_fixture()
    first = services.read_file(project)

    again = services.read_file(project)

    assert again._data is None  # known from its status: no bytes read
    assert again.fingerprint == first.fingerprint == project.fingerprint
    assert again.data == first.data  # read when asked for, and still of that fingerprint


def test_a_file_changed_in_place_to_bytes_of_the_same_length_is_hashed_again(root, settled):
    project = import_fixture()
    services.read_file(project)
    path = root / project.path
    same_length = path.read_bytes().replace(b'name="Dosing Line"', b'name="Dosing Lime"', 1)
    with path.open("r+b") as handle:  # in place: the same inode, the same size
        handle.write(same_length)

    answer = reads.overview(project)

    assert answer["accepted_revision"] == 2
    assert answer["name"] == "Dosing Lime"
    [event] = external_changes()
    assert event.arguments["fingerprint"] == hashlib.sha256(same_length).hexdigest()


def test_a_file_changed_within_the_settling_time_is_hashed_on_every_read(root):
    project = import_fixture()  # written just now: not settled

    services.read_file(project)
    again = services.read_file(project)

    assert again._data is not None


def test_bytes_read_later_that_no_longer_match_the_known_fingerprint_are_refused(root, settled):
    project = import_fixture()
    services.read_file(project)
    known = services.read_file(project)
    change_on_disk(root, project)

    with pytest.raises(FileChanged):
        _ = known.data


def test_a_document_whose_file_changes_between_its_status_and_its_bytes_is_read_afresh(root, settled, monkeypatch):
    project = import_fixture()
    services.read_file(project)
    services.clear_cache()  # the parsed document gone (a restart), its bytes needed
    services.read_file(project)  # the status known again
    known = services.read_file
    changed: list[bytes] = []

    def written_meanwhile(project: Project, *, fresh: bool = False) -> services.ProjectFile:
        file = known(project, fresh=fresh)
        if not changed:  # another tool writes after the status was judged unchanged, before the bytes are read
            changed.append(change_on_disk(root, project))
        return file

    monkeypatch.setattr(services, "read_file", written_meanwhile)

    answer = reads.overview(project)

    assert answer["accepted_revision"] == 2
    assert answer["name"] == "Dosing Line, edited"


# --- export ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", fixture_params(valid_only=True))
def test_export_of_an_unchanged_fixture_is_the_file_byte_for_byte(fixture):
    project = do_import_project(fixture.read_bytes(), slug="plant", acting_user="tests")

    assert export_bytes(project) == fixture.read_bytes()


def test_export_after_an_external_change_is_the_changed_file(root):
    project = import_fixture()
    changed = change_on_disk(root, project)

    assert export_bytes(project) == changed
