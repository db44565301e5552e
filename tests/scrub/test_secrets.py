"""SecretScrubber: each kind of credential replaced, and what only looks like one left alone.

The credentials are made up, and built from pieces so that no scanner of this repository
takes them for real ones.
"""

from __future__ import annotations

import base64
import hashlib
import uuid

import pytest

from soong_store import SecretScrubber
from soong_store.model.ids import new_id, new_session_id
from soong_store.scrub.secrets import KINDS

B64 = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"  # 40 characters, AWS's documented example
AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\nVTLw7onLRnrq0/Iz"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"
GITHUB = "ghp_" + "16C7e42F292c6912E7710c838347Ae178B4a"
GITHUB_FINE = (
    "github_pat_"
    + "11ABCDEFG0123456789_"
    + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ab"
)
GITLAB = "glpat-" + "xYz12AbCdEfGhIjKlMnO"
OPENAI = "sk-proj-" + "Abc123Def456Ghi789Jkl012Mno345Pqr678Stu901Vwx234Yz"
OPENAI_CLASSIC = "sk-" + "Zr4pQ8mN2xV6bL1kT9wY3hJ7fD5sA0gE" + "uC8oI2nB"
ANTHROPIC = "sk-ant-api03-" + "Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8L9z0X1c2V3b4N5m6" + "-_AbCdEfGh"
GOOGLE = "AIza" + "SyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe"
JWT = (
    "eyJhbGciOiJIUzI1NiJ9"
    + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0"
    + ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)

TRUE_POSITIVES = [
    # (kind, text, what must be gone)
    ("aws-access-key-id", f"export AWS_ACCESS_KEY_ID={AWS_ID}", AWS_ID),
    ("aws-access-key-id", f'{{"AccessKeyId": "ASIA{AWS_ID[4:]}"}}', f"ASIA{AWS_ID[4:]}"),
    ("aws-secret-access-key", f"aws_secret_access_key = {B64}", B64),
    ("aws-secret-access-key", f"export AWS_SECRET_ACCESS_KEY={B64}", B64),
    ("aws-secret-access-key", f'"SecretAccessKey": "{B64}"', B64),
    ("private-key", f"cat id_rsa\n{PEM}\n", PEM_BODY[:40]),
    ("private-key", PEM.replace("RSA ", "OPENSSH "), PEM_BODY[:40]),
    ("private-key", PEM.replace("RSA ", "ENCRYPTED "), PEM_BODY[:40]),
    (
        "private-key",  # a service-account key file, as a tool prints its JSON
        '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\n'
        + PEM_BODY.replace("\n", "\\n")
        + '\\n-----END PRIVATE KEY-----\\n", "client_email": "a@b.iam.gserviceaccount.com"}',
        PEM_BODY[:40],
    ),
    ("private-key", f"-----BEGIN EC PRIVATE KEY-----\n{PEM_BODY}\n(output cut)", PEM_BODY[:40]),
    ("google-api-key", f"https://maps.googleapis.com/api?key={GOOGLE}", GOOGLE),
    ("google-oauth-token", "token: ya29." + "a0AfH6SMBx4Kq9yZ_LmN8pQrStUvWxYz", "a0AfH6SMBx4Kq9"),
    (
        "azure-storage-key",
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey="
        + "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
        + ";EndpointSuffix=core.windows.net",
        "Eby8vdM02xNOcqFlqUwJ",
    ),
    (
        "azure-storage-key",
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey="
        + "k3Jz8Qm2Vn5Tb7Xc1Lp9Ws4Re6Yu0Io2Pa8Sd3Fg5H=",
        "k3Jz8Qm2Vn5Tb7Xc1Lp9",
    ),
    (
        "azure-sas-signature",
        "https://acct.blob.core.windows.net/c/b?sv=2022-11-02&se=2030-01-01&sig="
        + "Zm9vYmFyYmF6cXV4cXV1eHF1dXpxdXV6cXV1enF1dXo%3D",
        "Zm9vYmFyYmF6cXV4",
    ),
    (
        "azure-client-secret",
        "client_secret=" + "Ab1" + "8Q~" + "xYz1234567890abcdefGHIJKLmnopqrst",
        "8Q~xYz",
    ),
    ("openai-api-key", f"OPENAI_API_KEY={OPENAI}", OPENAI),
    ("openai-api-key", f"key: {OPENAI_CLASSIC}.", OPENAI_CLASSIC),
    ("anthropic-api-key", f"ANTHROPIC_API_KEY={ANTHROPIC}", ANTHROPIC),
    ("openrouter-api-key", "sk-or-v1-" + "0123456789abcdef" * 4, "0123456789abcdef"),
    (
        "huggingface-token",
        "HF_TOKEN=hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
        "AbCdEfGhIjKlMnOp",
    ),
    ("groq-api-key", "gsk_" + "A1b2C3d4E5f6" * 4 + "G7h8", "A1b2C3d4E5f6"),
    ("xai-api-key", "xai-" + "Q1w2E3r4T5y6U7i8O9p0" * 4, "Q1w2E3r4T5y6U7i8O9p0"),
    ("perplexity-api-key", "pplx-" + "a1B2c3D4e5F6g7H8" * 3, "a1B2c3D4e5F6g7H8"),
    ("replicate-api-token", "r8_" + "Zx9Cv8Bn7Mm6Ll5Kk4Jj3Hh2Gg1Ff0Dd9Ss8A", "Zx9Cv8Bn7Mm6Ll5Kk4"),
    ("github-token", f"git clone https://x:{GITHUB}@github.com/o/r", GITHUB),
    ("github-token", f"GH_TOKEN={GITHUB_FINE}", GITHUB_FINE),
    ("github-token", "gho_" + GITHUB[4:], GITHUB[4:]),
    ("gitlab-token", f"PRIVATE-TOKEN: {GITLAB}", GITLAB),
    (
        "bearer-token",
        "curl -H 'Authorization: Bearer abc123.def456-ghi789'",
        "abc123.def456-ghi789",
    ),
    (
        "bearer-token",
        '{"authorization": "Bearer Zm9vYmFyYmF6cXV4cXV1eA"}',
        "Zm9vYmFyYmF6cXV4cXV1eA",
    ),
    ("bearer-token", "Bearer Zm9vYmFyYmF6cXV4cXV1eA", "Zm9vYmFyYmF6cXV4cXV1eA"),
    ("authorization", "Authorization: Basic dXNlcjpodW50ZXIy", "dXNlcjpodW50ZXIy"),
    ("jwt", f"session cookie {JWT}", JWT),
    ("url-password", "postgresql+psycopg://app:hunter2@db.internal:5432/prod", "hunter2"),
]


@pytest.mark.parametrize(("kind", "text", "secret"), TRUE_POSITIVES)
def test_a_credential_is_replaced_by_its_kind(kind: str, text: str, secret: str):
    scrubbed = SecretScrubber()(text)
    assert secret not in scrubbed
    assert f"[REDACTED:{kind}]" in scrubbed


def test_every_kind_has_a_true_positive():
    assert {kind for kind, _, _ in TRUE_POSITIVES} == set(KINDS)


def test_only_the_secret_part_of_an_assignment_or_header_goes():
    scrub = SecretScrubber()
    assert scrub(f"aws_secret_access_key = {B64}\nregion = eu-west-1") == (
        "aws_secret_access_key = [REDACTED:aws-secret-access-key]\nregion = eu-west-1"
    )
    assert scrub("Authorization: Bearer abcdefghijklmnop1234 rest") == (
        "Authorization: Bearer [REDACTED:bearer-token] rest"
    )
    assert scrub(f"before\n{PEM}\nafter") == "before\n[REDACTED:private-key]\nafter"
    assert (
        scrub("mysql://root:pw@localhost/db") == "mysql://root:[REDACTED:url-password]@localhost/db"
    )
    assert scrub(f"k={ANTHROPIC} k={OPENAI}") == (
        "k=[REDACTED:anthropic-api-key] k=[REDACTED:openai-api-key]"
    )
    assert scrub("Authorization: Basic dXNlcjpodW50ZXIy") == (
        "Authorization: Basic [REDACTED:authorization]"
    )


def test_scrubbing_twice_changes_nothing_more():
    scrub = SecretScrubber()
    for _, text, _ in TRUE_POSITIVES:
        once = scrub(text)
        assert scrub(once) == once


FALSE_POSITIVES = [
    hashlib.sha1(b"commit").hexdigest(),
    hashlib.sha256(b"a file").hexdigest(),
    "sha512-" + base64.b64encode(hashlib.sha512(b"package").digest()).decode(),
    str(uuid.UUID(int=0x123E4567E89B12D3A456426614174000)),
    base64.b64encode(b"The quick brown fox jumps over the lazy dog and keeps running").decode(),
    new_id("node"),
    new_id("art"),
    new_session_id(),
    "def task_sk_handler(disk_usage, risk_score): return ask_user(bearer_of=news)",
    "pip install scikit-learn; import sklearn  # sk-learn is its old name",
    "css: .task-list-item-checkbox-very-long-class-name-here { color: red }",
    "The bearer of this letter is authorized. Authorization: required.",
    "AKIAIOSFODNN7EXAMPL",  # one short
    "XAKIAIOSFODNN7EXAMPLE",  # inside a longer word
    "secret_key = os.environ['SECRET_KEY']",
    "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTAN\n-----END CERTIFICATE-----",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIB\n-----END PUBLIC KEY-----",
    "https://user@example.com:8080/path?q=1",
    "ssh git@github.com:owner/repo.git",
    "eyJhbGciOiJIUzI1NiJ9 is a base64 JSON header",
    "ghp_short",
    "glpat-short",
    "for i in range(10):\n    print(f'{i}: {i ** 2}')\n",
    "[REDACTED:github-token]",
]


@pytest.mark.parametrize("text", FALSE_POSITIVES)
def test_what_only_looks_like_a_credential_is_left_alone(text: str):
    assert SecretScrubber()(text) == text


def test_text_without_a_credential_comes_back_as_the_same_object():
    text = "nothing to see " * 100
    assert SecretScrubber()(text) is text


def test_kinds_narrows_the_scrubber():
    only = SecretScrubber(kinds=["github-token"])
    assert only.kinds == ("github-token",)
    assert only(f"{GITHUB} {AWS_ID}") == f"[REDACTED:github-token] {AWS_ID}"
    assert repr(only) == "SecretScrubber(('github-token',))"
    openai = SecretScrubber(kinds=["openai-api-key"])  # one kind of a pattern of several
    assert openai(f"{ANTHROPIC} {OPENAI}") == f"{ANTHROPIC} [REDACTED:openai-api-key]"
    assert repr(SecretScrubber()) == "SecretScrubber()"


@pytest.mark.parametrize("kinds", [["no-such-kind"], "github-token"])
def test_an_unknown_kind_is_refused(kinds: object):
    with pytest.raises(ValueError, match="kinds"):
        SecretScrubber(kinds=kinds)  # type: ignore[arg-type]


def test_many_scrubs_each_text_as_a_call_of_its_own_would():
    scrub = SecretScrubber()
    texts = [text for _, text, _ in TRUE_POSITIVES] + FALSE_POSITIVES + ["", "a\x00" + GITHUB]
    assert scrub.many(texts) == [scrub(text) for text in texts]
    assert scrub.many(texts[:-1]) == [scrub(text) for text in texts[:-1]]  # one joined scan
    plain = ["nothing", "here either"]
    assert all(a is b for a, b in zip(scrub.many(plain), plain, strict=True))
