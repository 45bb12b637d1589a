"""The HTTPS listener of `runmcp --tls-port`, end to end on loopback: the real OpenSSL command line and Python's
`ssl` as clients. Only TLS 1.2 and 1.3 are spoken, with the certificate the server made (verified against its
file, by address and by name), no compression and no client-initiated renegotiation; plain HTTP and HTTPS
answer side by side, or HTTPS alone with `--no-http`; and a restart keeps the certificate unless the names the
server answers to changed."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from caretaker.ca import cert_fingerprint
from tests.live import ROOT, LiveServer, free_port, prepare, run_server, scratch_database, stop_process, wait_for_port

pytestmark = [pytest.mark.live]

OPENSSL = shutil.which("openssl")
needs_openssl = pytest.mark.skipif(OPENSSL is None, reason="the openssl command line is not installed")
# Debian's OpenSSL will not even offer TLS 1.1 or 1.0 at its default security level; at level 0 the client
# offers them, so a failed handshake is the server's refusal (the protocol_version alert), not the client's.
ANY_CLIENT_CIPHER = "DEFAULT@SECLEVEL=0"
SERVER_REFUSED_VERSION = "alert protocol version"
TLS_FILES = ("server.crt", "server.key", "server.json")


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory) -> Iterator[LiveServer]:
    data_dir = tmp_path_factory.mktemp("tls-live")
    with scratch_database() as database:
        env, token = prepare(data_dir, **database)
        with run_server(env, token, data_dir, tls=True) as server:
            yield server


def tls_folder(server: LiveServer) -> Path:
    return server.data_dir / "secrets" / "tls"


@pytest.fixture
def server_crt(tls_server) -> Path:
    return tls_folder(tls_server) / "server.crt"


def s_client(port: int, *options: str) -> subprocess.CompletedProcess[str]:
    """One `openssl s_client` connection that quits as soon as the handshake is done (stdin at its end)."""
    return subprocess.run(
        [OPENSSL or "openssl", "s_client", "-connect", f"127.0.0.1:{port}", *options],
        input="",
        capture_output=True,
        text=True,
        timeout=30,
    )


def printed(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout + done.stderr


def tls_connect(port: int, context: ssl.SSLContext, server_hostname: str) -> tuple[str | None, str | None, bytes]:
    """Connect to the TLS port; the negotiated version, compression and the certificate the server presented."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as sock,
        context.wrap_socket(sock, server_hostname=server_hostname) as tls,
    ):
        return tls.version(), tls.compression(), tls.getpeercert(binary_form=True) or b""


def fingerprint_of_file(path: Path) -> str:
    return cert_fingerprint(x509.load_pem_x509_certificate(path.read_bytes()))


# --- protocol versions -----------------------------------------------------------------------------------


@needs_openssl
@pytest.mark.parametrize(("option", "protocol"), [("-tls1_3", "TLSv1.3"), ("-tls1_2", "TLSv1.2")])
def test_openssl_completes_a_verified_handshake_on_tls_1_3_and_1_2(tls_server, server_crt, option, protocol):
    done = s_client(
        tls_server.tls_port, option, "-CAfile", str(server_crt), "-verify_return_error", "-verify_ip", "127.0.0.1"
    )

    output = printed(done)
    assert done.returncode == 0, output
    # The session's summary line; TLS 1.3 prints no "Protocol :" block unless a session ticket was read.
    assert f"New, {protocol}, Cipher is " in output
    assert "Verify return code: 0 (ok)" in output
    assert "Compression: NONE" in output


@needs_openssl
@pytest.mark.parametrize("option", ["-tls1_1", "-tls1"])
def test_openssl_offering_tls_1_1_or_1_0_is_refused_by_the_server(tls_server, option):
    done = s_client(tls_server.tls_port, option, "-cipher", ANY_CLIENT_CIPHER)

    output = printed(done)
    assert done.returncode != 0, output
    assert SERVER_REFUSED_VERSION in output
    assert "Cipher is (NONE)" in output


@pytest.mark.parametrize("hostname", ["127.0.0.1", "localhost"])
def test_python_ssl_verifies_the_made_certificate_by_address_and_by_name_on_tls_1_3(tls_server, server_crt, hostname):
    context = ssl.create_default_context(cafile=server_crt)

    version, compression, presented = tls_connect(tls_server.tls_port, context, hostname)

    assert version == "TLSv1.3"
    assert compression is None
    assert x509.load_der_x509_certificate(presented) == x509.load_pem_x509_certificate(server_crt.read_bytes())


def test_python_ssl_capped_at_tls_1_2_gets_tls_1_2(tls_server, server_crt):
    context = ssl.create_default_context(cafile=server_crt)
    context.maximum_version = ssl.TLSVersion.TLSv1_2

    version, compression, _ = tls_connect(tls_server.tls_port, context, "localhost")

    assert version == "TLSv1.2"
    assert compression is None


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_python_ssl_speaking_only_tls_1_1_is_refused_by_the_server(tls_server, server_crt):
    context = ssl.create_default_context(cafile=server_crt)
    context.set_ciphers(ANY_CLIENT_CIPHER)
    context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_1

    with pytest.raises(ssl.SSLError) as refused:
        tls_connect(tls_server.tls_port, context, "localhost")

    assert refused.value.reason == "TLSV1_ALERT_PROTOCOL_VERSION"


def test_a_name_the_certificate_does_not_carry_fails_hostname_checking(tls_server, server_crt):
    context = ssl.create_default_context(cafile=server_crt)

    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        tls_connect(tls_server.tls_port, context, "forge.example.com")


# --- renegotiation ---------------------------------------------------------------------------------------


@needs_openssl
def test_client_initiated_renegotiation_on_tls_1_2_is_refused(tls_server, server_crt):
    # "R" asks s_client to renegotiate. Refused, the server's no_renegotiation alert ends the connection and
    # s_client with it; were it allowed, the connection would stay open and the wait below run out.
    command = [OPENSSL or "openssl", "s_client", "-connect", f"127.0.0.1:{tls_server.tls_port}", "-tls1_2"]
    process = subprocess.Popen(
        [*command, "-CAfile", str(server_crt), "-verify_return_error"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdin is not None
        process.stdin.write("R\n")
        process.stdin.flush()
        output, _ = process.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"the connection outlived a renegotiation request:\n{output}")

    assert "New, TLSv1.2, Cipher is " in output
    assert "RENEGOTIATING" in output
    assert ":no renegotiation:" in output
    assert process.returncode != 0


# --- HTTP and HTTPS --------------------------------------------------------------------------------------


def test_plain_http_and_https_answer_side_by_side(tls_server, server_crt):
    assert httpx.get(f"{tls_server.base}/healthz", timeout=10).status_code == 200
    verified = ssl.create_default_context(cafile=server_crt)

    answered = httpx.get(f"{tls_server.tls_base}/healthz", verify=verified, timeout=10)

    assert answered.status_code == 200
    assert answered.json() == {"status": "ok"}


# --- further starts in the same data dir -----------------------------------------------------------------


@pytest.fixture
def tls_files_restored(tls_server) -> Iterator[dict[str, bytes]]:
    """The module server's certificate files, put back after a test whose restart made new ones, so the file
    the other tests verify against is still the one the module server presents."""
    folder = tls_folder(tls_server)
    kept = {name: (folder / name).read_bytes() for name in TLS_FILES}
    yield kept
    for name, content in kept.items():
        (folder / name).write_bytes(content)


def file_states(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    return {
        name: ((folder / name).read_bytes(), (folder / name).stat().st_ino, (folder / name).stat().st_mtime_ns)
        for name in TLS_FILES
    }


@contextmanager
def another_start(server: LiveServer, *options: str, **env: str) -> Iterator[subprocess.Popen]:
    """One more `runmcp` process in the module server's data dir, until the block ends."""
    log_path = server.data_dir / f"another-start-{free_port()}.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "runmcp", *options],
            cwd=ROOT,
            env={**server.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield process
        except Exception as exc:
            stop_process(process)
            raise AssertionError(f"{exc}\nrunmcp said:\n{log_path.read_text()}") from exc
        finally:
            stop_process(process)


def presented_fingerprint(host: str, port: int, process: subprocess.Popen, limit: float = 30.0) -> str:
    """The fingerprint of the certificate a server starting on `host`:`port` presents, once it listens."""
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"runmcp exited with {process.returncode} before serving TLS on {host}:{port}")
        try:
            with (
                socket.create_connection((host, port), timeout=5) as sock,
                unverified.wrap_socket(sock, server_hostname="localhost") as tls,
            ):
                return cert_fingerprint(x509.load_der_x509_certificate(tls.getpeercert(binary_form=True) or b""))
        except OSError:
            time.sleep(0.1)  # polling a process that is starting; there is no event to wait on
    raise RuntimeError(f"nothing served TLS on {host}:{port} after {limit}s")


def ipv6_loopback_works() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_a_restart_on_the_same_address_keeps_the_certificate_and_its_files(tls_server, tls_files_restored):
    folder = tls_folder(tls_server)
    before = file_states(folder)
    tls_port = free_port()

    with another_start(tls_server, "--host", "127.0.0.1", "--port", str(free_port()), "--tls-port", str(tls_port)) as p:
        served = presented_fingerprint("127.0.0.1", tls_port, p)

    assert served == fingerprint_of_file(folder / "server.crt")
    assert file_states(folder) == before


@pytest.mark.skipif(not ipv6_loopback_works(), reason="no IPv6 loopback here")
def test_a_restart_on_ipv6_loopback_keeps_the_certificate_made_for_ipv4_loopback(tls_server, tls_files_restored):
    # Both loopback addresses give the same names (localhost, 127.0.0.1, ::1): nothing for members to re-trust.
    folder = tls_folder(tls_server)
    before = file_states(folder)
    tls_port = free_port()

    with another_start(tls_server, "--host", "::1", "--port", str(free_port()), "--tls-port", str(tls_port)) as p:
        served = presented_fingerprint("::1", tls_port, p)

    assert served == fingerprint_of_file(folder / "server.crt")
    assert file_states(folder) == before


def test_a_restart_on_another_address_makes_a_new_certificate_naming_it(tls_server, tls_files_restored):
    folder = tls_folder(tls_server)
    first = fingerprint_of_file(folder / "server.crt")
    tls_port = free_port()

    with another_start(tls_server, "--host", "127.0.0.2", "--port", str(free_port()), "--tls-port", str(tls_port)) as p:
        served = presented_fingerprint("127.0.0.2", tls_port, p)

    assert served != first
    assert served == fingerprint_of_file(folder / "server.crt")
    made_for = json.loads((folder / "server.json").read_text())
    assert made_for == {"names": ["localhost", "127.0.0.1", "::1", "127.0.0.2"], "key_type": "rsa4096"}


def test_a_restart_with_other_allowed_hosts_makes_a_new_certificate_naming_them(tls_server, tls_files_restored):
    folder = tls_folder(tls_server)
    first = fingerprint_of_file(folder / "server.crt")
    tls_port = free_port()
    options = ("--host", "127.0.0.1", "--port", str(free_port()), "--tls-port", str(tls_port))

    with another_start(tls_server, *options, FORGE_ALLOWED_HOSTS="forge.internal") as p:
        served = presented_fingerprint("127.0.0.1", tls_port, p)

    assert served != first
    assert served == fingerprint_of_file(folder / "server.crt")
    assert json.loads((folder / "server.json").read_text())["names"] == [
        "localhost",
        "127.0.0.1",
        "::1",
        "forge.internal",
    ]


def test_https_only_serves_https_and_nothing_on_the_plain_port(tls_server, server_crt):
    plain_port, tls_port = free_port(), free_port()
    options = ("--host", "127.0.0.1", "--port", str(plain_port), "--tls-port", str(tls_port), "--no-http")

    with another_start(tls_server, *options) as process:
        wait_for_port(tls_port, process)
        answered = httpx.get(
            f"https://127.0.0.1:{tls_port}/healthz", verify=ssl.create_default_context(cafile=server_crt), timeout=10
        )
        with socket.socket() as sock:
            plain = sock.connect_ex(("127.0.0.1", plain_port))

    assert answered.status_code == 200
    assert answered.json() == {"status": "ok"}
    assert plain != 0
