"""issue 16's sweep for `labwright bench`: every out-of-range number, every unreadable result file and a TTS "server"
that answers a web page are one line on stderr, exit 2, no traceback, nothing sent and nothing written.

`bench llm --contexts 1000000000000` used to hang building a terabyte prompt; `bench tts` called an HTML page audio.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from support.cli_result import Result, runner


@pytest.fixture
def labwright(capsys):
    return runner(capsys)


def one_line_exit_2(result: Result, *words: str) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("labwright: error: ") and "Traceback" not in result.stderr, lines
    assert all(word in lines[0] for word in words), (words, lines[0])
    return lines[0]


@pytest.mark.parametrize(("args", "words"), [
    (["--contexts", "1000000000000"], ("--contexts 1,000,000,000,000 is more than 10,485,760 tokens",
                                       "within the model's context")),
    (["--contexts", "512,99999999k"], ("--contexts 102,399,998,976 is more than",)),
    (["--contexts", "8"], ("--contexts 8 is too small",)),
    (["--contexts", "-512"], ("'-512' is not a whole number of tokens",)),
    (["--decode", "0"], ("--decode 0: generate 1 to 1,048,576 tokens",)),
    (["--decode", "-5"], ("--decode -5",)),
    (["--decode", "100000000"], ("--decode 100000000",)),
    (["--trials", "0"], ("--trials 0: run 1 to 1000 trials",)),
    (["--trials", "-1"], ("--trials -1",)),
    (["--trials", "1000000"], ("--trials 1000000",)),
    (["--timeout", "0"], ("--timeout 0: give the seconds to wait on the server per request, more than 0",)),
    (["--timeout", "-1"], ("--timeout -1",)),
    (["--timeout", "nan"], ("--timeout nan",)),
    (["--timeout", "1e9"], ("--timeout 1e+09", "at most 86,400")),
    (["--endpoint", "embeddings"], ("--endpoint 'embeddings' is not one of chat, completions",)),
])
def test_bench_llm_numbers_out_of_range_are_refused_before_anything_is_sent(labwright, standin, args, words):
    for command in (["bench"], ["bench", "llm"]):
        one_line_exit_2(labwright(*command, "--url", standin.url, *args), *words)
    assert standin.requests == []  # not a byte sent, no prompt built


@pytest.mark.parametrize(("content", "words"), [
    (None, ("--ca", "root.crt")),
    (b"not a certificate\n", ("--ca", "not a readable PEM certificate")),
])
def test_a_ca_that_is_no_certificate_is_refused_before_anything_is_sent(labwright, standin, tmp_path, content,
                                                                         words):
    """--ca (the TLS gateway's root, docs/gateway.md): a missing file or one that holds no certificate is one line."""
    ca = tmp_path / "root.crt"
    if content is not None:
        ca.write_bytes(content)
    one_line_exit_2(labwright("bench", "llm", "--url", standin.url, "--ca", str(ca), "--contexts", "64"), *words)
    assert standin.requests == []


def test_a_context_beyond_what_a_vllm_server_lists_is_refused_before_prompts_are_built(labwright, standin):
    standin.script.listing = {"object": "list", "data": [{"id": "standin", "object": "model", "max_model_len": 4096}]}
    result = labwright("bench", "llm", "--url", standin.url, "--contexts", "8192", "--decode", "64")
    # The server had to be asked, so the progress line came first; the error is the one error line, and the last.
    errors = [line for line in result.stderr.splitlines() if line.startswith("labwright: error: ")]
    assert result.returncode == 2 and len(errors) == 1 and result.stderr.splitlines()[-1] == errors[0], result.stderr
    assert "--contexts 8192 + --decode 64 exceeds the server's context of 4096" in errors[0]
    assert not [path for path, _, _ in standin.requests if path.endswith("/completions")]  # no prompt sent


@pytest.mark.parametrize(("name", "content", "words"), [
    # fixed junk, not os.urandom: xdist's workers must collect the same test ids
    ("run.json", hashlib.sha512(b"not a result").digest() + b"\xff", ("run.json",)),
    ("model.gguf", b"GGUF\x03\x00\x00\x00" + bytes(range(256)), ("model.gguf is a binary file, not text",)),
    ("latin1.json", '{"label": "café"}'.encode("latin-1"), ("latin1.json is not UTF-8 text",)),
    ("empty.json", b"", ("empty.json is not valid JSON",)),
    ("other.json", b'{"schema": "something else"}', ("other.json: not a labwright bench result",)),
])
def test_bench_compare_on_a_file_that_is_not_a_result_is_one_line(labwright, tmp_path, name, content, words):
    path = tmp_path / name
    path.write_bytes(content)
    one_line_exit_2(labwright("bench", "compare", str(path), str(path)), str(path), *words)


def test_bench_compare_on_a_directory_or_a_missing_file_is_one_line(labwright, tmp_path):
    one_line_exit_2(labwright("bench", "compare", str(tmp_path), str(tmp_path)), f"{tmp_path} is a directory")
    missing = tmp_path / "nope.json"
    one_line_exit_2(labwright("bench", "compare", str(missing), str(missing)), f"{missing}: no such file")


# --- bench tts --------------------------------------------------------------------------------------------------

@dataclass
class Answer:
    content_type: str
    body: bytes


class _Server(ThreadingHTTPServer):
    answer: Answer
    posts: int = 0


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.posts += 1
        answer = self.server.answer
        self.send_response(200)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        self.wfile.write(answer.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def speech() -> Iterator[_Server]:
    """A local HTTP server on 127.0.0.1 answering every POST with ``server.answer``."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.answer = Answer("audio/mpeg", b"ID3\x04\x00" + bytes(2000))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def url(server: _Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def text(tmp_path) -> Path:
    path = tmp_path / "speech.txt"
    path.write_text("Hello there. How are you?")
    return path


@pytest.mark.parametrize("answer", [
    Answer("text/html; charset=utf-8", b"<!DOCTYPE html><html><body>Welcome to nginx!</body></html>"),
    Answer("audio/mpeg", b"<!doctype html><html><body>Login</body></html>"),  # a proxy that lies about the type
    Answer("application/json", b'{"detail": "Not Found"}'),
    Answer("application/octet-stream", b'  <html><head><title>router</title></head></html>'),
])
def test_bench_tts_against_a_web_page_is_one_line_not_audio(labwright, speech, text, answer):
    speech.answer = answer
    result = labwright("bench", "tts", "--url", url(speech), "--text", str(text), "--runs", "1")
    # Only the server's answer tells: the step line came first; the error is the one error line, and the last.
    errors = [line for line in result.stderr.splitlines() if line.startswith("labwright: error: ")]
    assert result.returncode == 2 and len(errors) == 1 and result.stderr.splitlines()[-1] == errors[0], result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    line = errors[0]
    assert f"--url {url(speech)}:" in line and "not audio" in line and "point --url at the TTS server" in line
    assert speech.posts == 1  # refused at the first answer


def test_bench_tts_measures_a_server_that_answers_audio(labwright, speech, text):
    result = labwright("bench", "tts", "--url", url(speech), "--text", str(text), "--runs", "1", "--format", "mp3",
                       "--json")
    assert result.returncode == 0, result.stderr
    assert '"error": ""' in result.stdout and speech.posts == 4  # warm-up + 1 run, streamed and whole


@pytest.mark.parametrize(("args", "words"), [
    (["--runs", "0"], ("--runs 0: give 1 to 1000 timed requests",)),
    (["--runs", "-3"], ("--runs -3",)),
    (["--timeout", "0"], ("--timeout 0: give the seconds to wait per request, more than 0",)),
    (["--timeout", "-1"], ("--timeout -1",)),
    (["--timeout", "nan"], ("--timeout nan",)),
    (["--format", "mp4"], ("--format 'mp4'",)),
])
def test_bench_tts_numbers_out_of_range_are_refused_before_anything_is_sent(labwright, speech, text, args, words):
    one_line_exit_2(labwright("bench", "tts", "--url", url(speech), "--text", str(text), *args), *words)
    assert speech.posts == 0


@pytest.mark.parametrize(("content", "words"), [
    (b"GGUF\x03\x00\x00\x00\x00" * 10, ("is a binary file, not text",)),
    (b"caf\xe9 au lait", ("is not UTF-8 text (byte 0xe9 at offset 3",)),
    (b"   \n", ("the file is empty",)),
])
def test_bench_tts_text_that_is_not_utf8_text_is_one_line(labwright, speech, tmp_path, content, words):
    path = tmp_path / "speech.txt"
    path.write_bytes(content)
    one_line_exit_2(labwright("bench", "tts", "--url", url(speech), "--text", str(path)), *words)
    assert speech.posts == 0


def test_bench_tts_url_that_is_not_http_is_one_line(labwright, text):
    one_line_exit_2(labwright("bench", "tts", "--url", "ftp://127.0.0.1/", "--text", str(text)),
                    "--url 'ftp://127.0.0.1/'")


@pytest.mark.parametrize("bad", ["http://127.0.0.1:70000", "http://127.0.0.1:abc/v1"])
def test_bench_tts_url_with_an_impossible_port_is_one_line(labwright, text, bad):
    one_line_exit_2(labwright("bench", "tts", "--url", bad, "--text", str(text)), f"--url {bad!r}", "port")


def test_bench_plot_to_a_directory_is_refused_before_the_run(labwright, standin, tmp_path):
    pytest.importorskip("matplotlib")  # the 'plot' extra: --plot says so itself when it is missing
    one_line_exit_2(labwright("bench", "llm", "--url", standin.url, "--contexts", "64", "--plot", str(tmp_path)),
                    f"--plot {tmp_path} is a directory")
    assert standin.requests == [] and list(tmp_path.iterdir()) == []


def test_bench_plot_replaces_the_png_whole_and_leaves_no_temporary(tmp_path):
    pytest.importorskip("matplotlib")
    from labwright.bench import report

    doc = {"label": "a", "results": [{"context": 512, "warm": {"prefill_tps": 1000.0, "decode_tps": 30.0}}]}
    target = tmp_path / "bench.png"
    target.write_bytes(b"old")
    report.plot([doc], target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["bench.png"]


def test_tls_is_verified_against_the_ca_given_and_only_it(tmp_path):
    """A real TLS listener on 127.0.0.1 with a certificate of a CA made here: with that CA as --ca the connection is
    made, with the system store or another CA it is refused (TLS is never unverified)."""
    import datetime as dt
    import ipaddress
    import socket
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from labwright.bench.openai import Endpoint
    from labwright.errors import OperationFailed

    now, pem = dt.datetime.now(dt.UTC), serialization.Encoding.PEM

    def ca_pair(name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now)
                .not_valid_after(now + dt.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                             crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        return cert, key

    ca, ca_key = ca_pair("test CA")
    other, _ = ca_pair("another CA")
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gw")]))
              .issuer_name(ca.subject).public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
              .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                             critical=False)
              # Python 3.13's default context verifies X.509 strictly (VERIFY_X509_STRICT): a certificate without
              # the Authority Key Identifier fails there (CERTIFICATE_VERIFY_FAILED), as one without CA key usage
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
              .sign(ca_key, hashes.SHA256()))
    (tmp_path / "server.pem").write_bytes(server.public_bytes(pem) + server_key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(pem))
    (tmp_path / "other.pem").write_bytes(other.public_bytes(pem))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "server.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        for _ in range(3):
            conn, _ = listener.accept()
            try:
                context.wrap_socket(conn, server_side=True).close()
            except (ssl.SSLError, OSError):
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        Endpoint.parse(f"https://127.0.0.1:{port}/v1", ca=str(tmp_path / "ca.pem"), timeout=10).connect().close()
        for ca_file in (None, str(tmp_path / "other.pem")):
            with pytest.raises(OperationFailed, match="TLS to .* failed: CERTIFICATE_VERIFY_FAILED"):
                Endpoint.parse(f"https://127.0.0.1:{port}/v1", ca=ca_file, timeout=10).connect()
    finally:
        thread.join(timeout=10)
        listener.close()
