"""Credential-looking values: which are found, what stays (no false alarms on ordinary code), numbered placeholders
that give the secrets back, and the cursor's line."""

from __future__ import annotations

import time

import pytest
from sparkls.workspace.redact import PLACEHOLDER, find, mask, on_line, redact, unmask

from tests.conftest import CURSOR

AWS = "AKIAIOSFODNN7EXAMPLE"
GITHUB = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
RANDOM = "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA"  # a generated-looking literal
BODY = "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi\nZ1BjP5CE/Wm/Rr500PRK+Lh9x5eJPo5CAZ3/ANBE0\n"
KEY_BLOCK = f"-----BEGIN RSA PRIVATE KEY-----\n{BODY}-----END RSA PRIVATE KEY-----\n"

# (what, text with a secret, the text as the prompt shows it)
SECRETS = [
    ("an AWS access key id", f'aws = "{AWS}"', 'aws = "<redacted>"'),
    ("a temporary AWS key id", "ASIAY34FZKBOKMUTVV7A in a comment", "<redacted> in a comment"),
    (
        "a private key block, its markers kept",
        f"x = 1\n{KEY_BLOCK}y = 2\n",
        "x = 1\n-----BEGIN RSA PRIVATE KEY-----\n<redacted>\n-----END RSA PRIVATE KEY-----\ny = 2\n",
    ),
    (
        "a private key written as concatenated string literals",
        'KEY = (\n    "-----BEGIN PRIVATE KEY-----\\n"\n    "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi\\n"\n'
        '    "-----END PRIVATE KEY-----\\n"\n)\n',
        'KEY = (\n    "-----BEGIN PRIVATE KEY-----<redacted>-----END PRIVATE KEY-----\\n"\n)\n',
    ),
    (
        "a private key block cut off after its BEGIN line",
        f"x = 1\n{KEY_BLOCK[:80]}",
        "x = 1\n-----BEGIN RSA PRIVATE KEY-----\n<redacted>",
    ),
    (
        "a private key block cut off before its END line",
        f"{KEY_BLOCK[40:]}def f():\n    pass\n",
        "<redacted>\n-----END RSA PRIVATE KEY-----\ndef f():\n    pass\n",
    ),
    (
        "an OpenSSH private key",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
        "-----END OPENSSH PRIVATE KEY-----",
        "-----BEGIN OPENSSH PRIVATE KEY-----\n<redacted>\n-----END OPENSSH PRIVATE KEY-----",
    ),
    (
        "an Authorization header's bearer token",
        'h = {"Authorization": "Bearer abc123def456"}',
        'h = {"Authorization": "Bearer <redacted>"}',
    ),
    (
        "an Authorization header's basic credentials",
        "Authorization: Basic dXNlcjpwYXNzd29yZA==",
        "Authorization: Basic <redacted>",
    ),
    (
        "a long bearer token without a header",
        "curl -H 'bearer 9f8e7d6c5b4a39281706f5e4'",
        "curl -H 'bearer <redacted>'",
    ),
    ("a GitHub token", f'GH = "{GITHUB}"', 'GH = "<redacted>"'),
    ("a fine-grained GitHub token", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "<redacted>"),
    ("a GitLab token", "token: glpat-Ab3dEf6hIj9kLm2nOp5q", "token: <redacted>"),
    ("a Slack token", "SLACK = 'xoxb-1234567890-abcdefghij'", "SLACK = '<redacted>'"),
    ("a Stripe secret key", 'stripe.api_key = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"', 'stripe.api_key = "<redacted>"'),
    ("a Google API key", 'GOOGLE = "AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI"', 'GOOGLE = "<redacted>"'),
    (
        "an OpenAI-style key",
        'client = OpenAI("sk-proj-abc123DEF456ghi789JKL012mno345PQR")',
        'client = OpenAI("<redacted>")',
    ),
    ("a JWT", f"const t = '{JWT}';", "const t = '<redacted>';"),
    (
        "a password in a URL",
        'DB = "postgres://admin:hunter2@db.example.com/app"',
        'DB = "postgres://admin:<redacted>@db.example.com/app"',
    ),
    (
        "a random literal assigned to a key",
        f'aws_secret_access_key = "{RANDOM}"',
        'aws_secret_access_key = "<redacted>"',
    ),
    ("a hex literal assigned to an api key", "API_KEY = '5f4dcc3b5aa765d61d8327deb882cf99'", "API_KEY = '<redacted>'"),
    ("an attribute", f'self.api_key = "{RANDOM}"', 'self.api_key = "<redacted>"'),
    ("a keyword argument", f'Client(api_key="{RANDOM}")', 'Client(api_key="<redacted>")'),
    ("a dictionary entry", f'{{"client_secret": "{RANDOM}"}}', '{"client_secret": "<redacted>"}'),
    ("an annotated assignment", f'password: str = "{RANDOM}"', 'password: str = "<redacted>"'),
    ("a Rust constant", f'const API_KEY: &str = "{RANDOM}";', 'const API_KEY: &str = "<redacted>";'),
    ("a Go short assignment", f"apiToken := `{RANDOM}`", "apiToken := `<redacted>`"),
    (
        "an environment default",
        f'os.environ.setdefault("API_TOKEN", "{RANDOM}")',
        'os.environ.setdefault("API_TOKEN", "<redacted>")',
    ),
    ("a comparison with a literal", f'if token == "{RANDOM}":', 'if token == "<redacted>":'),
    ("a .env line", "API_KEY=5f4dcc3b5aa765d61d8327deb882cf99\nDEBUG=1\n", "API_KEY=<redacted>\nDEBUG=1\n"),
    ("an exported shell variable", "export GITHUB_TOKEN=abc123DEF456ghi789JKL0", "export GITHUB_TOKEN=<redacted>"),
    ("a YAML value", "  client_secret: abc123DEF456ghi789JKL0  # prod\n", "  client_secret: <redacted>  # prod\n"),
    ("a literal still being typed", f'KEY = "{RANDOM}', 'KEY = "<redacted>'),
]

# Ordinary code that names keys, tokens and passwords: left as it is.
ORDINARY = [
    "token = tokens[0]",
    'password_field = "password"',
    "KEY_UP = 38",
    "MAX_TOKENS = 1024",
    'tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-Coder-0.5B")',
    'SECRET_KEY = os.environ["SECRET_KEY"]',
    'api_key = os.environ.get("API_KEY", "default-dev-key")',
    'cache_key = f"user:{user_id}:profile"',
    'private_key_path = "/etc/ssl/private/server.key"',
    'token_version = "v1.2.3-beta.4+build.5678"',
    'SORT_KEY = "created_at_desc_2024_v2"',
    'password_hint = "Use at least 12 characters"',
    'key_env = "OPENAI_API_KEY"',
    "SECRET_KEY = settings.SECRET_KEY_V2",
    'headers = {"Authorization": f"Bearer {token}"}',
    'headers = {"Authorization": "Bearer " + token}',
    "Authorization: Bearer ${API_TOKEN}",
    'TEST_KEY = "test_key_12345678"',
    'spinner = "sk-fading-circle-spinner-animation-delay"',
    "the bearer tokenization step",
    "sorted(rows, key=lambda r: r[1])",
    'token_pattern = r"(?u)\\b\\w\\w+\\b"',
    "password = hash_password(raw_password_2024)",
    'url = "https://api.example.com/v1/tokens?page=2"',
    'PEM_HEADER = "-----BEGIN RSA PRIVATE KEY-----"\nPEM_FOOTER = "-----END RSA PRIVATE KEY-----"\n',
    "# The key block ends with -----END RSA PRIVATE KEY-----\n",
]


@pytest.mark.parametrize(("what", "text", "shown"), SECRETS, ids=[s[0] for s in SECRETS])
def test_a_credential_value_is_replaced_and_the_code_around_it_stays(what, text, shown):
    assert redact(text) == shown


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_code_naming_keys_tokens_and_passwords_is_left_as_it_is(text):
    assert find(text) == [] and redact(text) == text


@pytest.mark.parametrize(("what", "text", "shown"), SECRETS, ids=[s[0] for s in SECRETS])
def test_redacting_twice_changes_nothing_more(what, text, shown):
    assert redact(shown) == shown


@pytest.mark.parametrize(("what", "text", "shown"), SECRETS, ids=[s[0] for s in SECRETS])
def test_numbered_placeholders_give_every_secret_back(what, text, shown):
    masked, secrets = mask(text)
    assert "<redacted-1>" in masked and all(value not in masked for _, value in secrets)
    assert unmask(masked, secrets) == text


def test_the_same_secret_gets_the_same_number_and_numbers_in_the_text_are_skipped():
    text = f'a = "{AWS}"\nb = "{AWS}"\nc = "{GITHUB}"  # <redacted-2>\n'
    masked, secrets = mask(text)
    assert masked == 'a = "<redacted-3>"\nb = "<redacted-3>"\nc = "<redacted-4>"  # <redacted-2>\n'
    assert secrets == (("<redacted-3>", AWS), ("<redacted-4>", GITHUB))
    # A rewrite that moves the placeholders keeps each secret; a number it made up stays as written.
    assert unmask('c = "<redacted-4>"\na = "<redacted-3>" # <redacted-9>\n', secrets) == (
        f'c = "{GITHUB}"\na = "{AWS}" # <redacted-9>\n'
    )


def test_a_text_without_secrets_has_no_placeholders():
    assert mask("def f(x):\n    return x\n") == ("def f(x):\n    return x\n", ())
    assert PLACEHOLDER not in redact("def f(x):\n    return x\n")


def test_every_kind_is_named():
    kinds = {s.kind for _, text, _ in SECRETS for s in find(text)}
    assert kinds == {
        "aws-access-key",
        "private-key",
        "authorization",
        "github-token",
        "gitlab-token",
        "slack-token",
        "stripe-key",
        "google-api-key",
        "api-key",
        "jwt",
        "url-password",
        "assigned-secret",
    }


ON_LINE = [
    ("a credential on the cursor's line", f'def f():\n    key = "{AWS}"<|>\n', True),
    ("a credential after the cursor", f'def f():\n    k<|>ey = "{AWS}"\n', True),
    ("a literal being typed", f'def f():\n    api_key = "{RANDOM}<|>\n', True),
    ("the part before the cursor is a key", f'x = "{AWS}<|>9"\n', True),
    ("a token under a header on the line above", 'h = {\n    "Authorization":\n        "Bearer abcdef123<|>\n', True),
    ("inside a private key block", f"x = 1\n{KEY_BLOCK[:60]}<|>{KEY_BLOCK[60:]}y = 2\n", True),
    ("a credential on the line above only", f'key = "{AWS}"\nx = <|>\n', False),
    ("after a private key block", f"{KEY_BLOCK}def f():\n    <|>\n", False),
    ("ordinary code", "def f(token):\n    return token<|>\n", False),
    ("a line of base64 that is no key", "data = (\n    b64<|>\n)\nBLOB = 'aGVsbG8gd29ybGQgaGVsbG8gd29ybGQ='\n", False),
]


@pytest.mark.parametrize(("what", "text", "expected"), ON_LINE, ids=[c[0] for c in ON_LINE])
def test_the_cursors_line_holds_a_secret(what, text, expected):
    cursor = text.index(CURSOR)
    assert on_line(text.replace(CURSOR, "", 1), cursor) is expected


PATHOLOGICAL = {  # inputs that make a careless pattern backtrack for minutes (each ~100 KB)
    "one long identifier full of keywords": "key" * 35_000,
    "keyword names without values": "a_key_b." * 12_000,
    "BEGIN lines without an END": "-----BEGIN RSA PRIVATE KEY-----\n" * 3_000,
    "END lines after base64": ("-----END RSA PRIVATE KEY-----\n" + "A" * 30 + "\n") * 1_700,
    "dotted words": "a." * 50_000,
    "an open literal assigned to a secret": 'secret = "' + "Ab1+" * 25_000,
}


@pytest.mark.parametrize("what", PATHOLOGICAL)
def test_finding_takes_linear_time_on_pathological_text(what):
    t0 = time.perf_counter()
    find(PATHOLOGICAL[what])
    assert time.perf_counter() - t0 < 3.0  # ~0.05 s here; a quadratic pattern takes minutes


def test_a_part_inside_a_private_key_block_is_masked_with_the_text_around_it_as_context():
    text = f"x = 1\n{KEY_BLOCK}y = 2\n"
    start = text.index("Z1Bj")  # the block's second body line: no BEGIN or END line in the part
    end = text.index("-----END")
    assert mask(text[start:end]) == (text[start:end], ())  # alone, it is just a line of base64
    masked, secrets = mask(text, start, end)
    assert masked == "<redacted-1>\n" and unmask(masked, secrets) == text[start:end]
    assert mask(text, text.index("y = 2"), len(text)) == ("y = 2\n", ())
