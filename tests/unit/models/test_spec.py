"""labwright.models.spec: what a model download may name, refused before anything runs in a guest."""

from __future__ import annotations

import pytest
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from labwright.errors import BadInput
from labwright.models import fetch
from labwright.models.spec import ModelSpec, check_dir, check_endpoint, parse_spec


def test_a_full_spec_is_kept_and_names_default_to_the_repo_name():
    spec = parse_spec({"repo": "Qwen/Qwen3-0.6B", "allow": ["*.json", "*.safetensors"], "ignore": "*.md"})
    assert spec == ModelSpec("Qwen/Qwen3-0.6B", "main", ("*.json", "*.safetensors"), ("*.md",), None, "Qwen3-0.6B")
    gguf = parse_spec({"repo": "org/m-GGUF", "revision": "a" * 40, "file": "q8/m-Q8_0.gguf", "name": "m"})
    assert (gguf.revision, gguf.file, gguf.name) == ("a" * 40, "q8/m-Q8_0.gguf", "m")


def test_the_digest_changes_with_every_field_and_the_runner_computes_the_same():
    base = parse_spec({"repo": "org/m"})
    others = [parse_spec({"repo": "org/m", "revision": "v1"}), parse_spec({"repo": "org/m", "allow": "*.json"}),
              parse_spec({"repo": "org/m", "ignore": "*.md"}), parse_spec({"repo": "org/m", "file": "x.gguf"}),
              parse_spec({"repo": "org/m", "name": "other"}), parse_spec({"repo": "org/n", "name": "m"})]
    assert len({base.digest(), *(o.digest() for o in others)}) == 1 + len(others)
    assert fetch.spec_digest(base.as_json()) == base.digest()


@pytest.mark.parametrize("repo", ["foo", "foo/bar", "123", "Foo-BAR_foo.bar123", "Qwen/Qwen3-0.6B", "a/" + "b" * 96])
def test_repo_ids_huggingface_hub_accepts_are_accepted(repo):
    validate_repo_id(repo)  # the client's own rule agrees
    assert parse_spec({"repo": repo}).repo == repo


@pytest.mark.parametrize("repo", ["datasets/foo/bar", ".repo_id", "foo--bar", "foo.git", "other..repo..id", "a/-b",
                                  "café/x", "a b", "a/" + "b" * 97, "/foo", "foo/"])
def test_repo_ids_huggingface_hub_refuses_are_refused_with_one_line(repo):
    with pytest.raises(HFValidationError):
        validate_repo_id(repo)
    with pytest.raises(BadInput) as caught:
        parse_spec({"repo": repo})
    message = str(caught.value)
    assert message.startswith("model_repo: ") and "\n" not in message and repr(repo) in message


@pytest.mark.parametrize(("data", "key", "words"), [
    ({}, "model_repo", "is required"),
    ({"repo": 7}, "model_repo", "is required"),
    ({"repo": "o/m", "revision": "a..b"}, "model_revision", "git's ref rules"),
    ({"repo": "o/m", "revision": "main lock"}, "model_revision", "git's ref rules"),
    ({"repo": "o/m", "revision": "-x"}, "model_revision", "git's ref rules"),
    ({"repo": "o/m", "revision": "v1.lock"}, "model_revision", "git's ref rules"),
    ({"repo": "o/m", "revision": "abc1234"}, "model_revision", "abbreviated"),
    ({"repo": "o/m", "revision": "A" * 40}, "model_revision", "abbreviated or upper-case"),
    ({"repo": "o/m", "allow": ["../x"]}, "model_allow", "no .."),
    ({"repo": "o/m", "ignore": ["/abs/*"]}, "model_ignore", "no leading /"),
    ({"repo": "o/m", "allow": [""]}, "model_allow", "not a file pattern"),
    ({"repo": "o/m", "allow": {"x": 1}}, "model_allow", "not a pattern or a list"),
    ({"repo": "o/m", "allow": ["*"] * 65}, "model_allow", "at most 64"),
    ({"repo": "o/m", "file": "model.safetensors"}, "model_file", "not a .gguf file"),
    ({"repo": "o/m", "file": "../x.gguf"}, "model_file", "not a path inside the repo"),
    ({"repo": "o/m", "file": "/x.gguf"}, "model_file", "not a path inside the repo"),
    ({"repo": "o/m", "file": "x.gguf", "allow": ["*"]}, "model_file", "not both"),
    ({"repo": "o/m", "name": "../up"}, "model_name", "not a directory name"),
    ({"repo": "o/m", "name": ".hidden"}, "model_name", "not a directory name"),
    ({"repo": "o/m", "revison": "v1"}, "model: unknown key revison", "the keys are"),
])
def test_bad_values_are_one_line_naming_the_key(data, key, words):
    with pytest.raises(BadInput) as caught:
        parse_spec(data)
    message = str(caught.value)
    assert message.startswith(key) and words in message and "\n" not in message, message


@pytest.mark.parametrize("value", ["relative/models", "/", "/usr", "/srv/my models", "/srv/$HOME", "/srv/../etc", ""])
def test_directories_must_be_dedicated_absolute_paths(value):
    with pytest.raises(BadInput, match=r"^model_dir: .* dedicated absolute path"):
        check_dir("dir", value)
    assert check_dir("dir", "/srv/models/") == "/srv/models"


@pytest.mark.parametrize("value", ["ftp://hub", "huggingface.co", "http://a b", "https://hub/$(id)"])
def test_an_endpoint_is_an_http_url(value):
    with pytest.raises(BadInput, match=r"^model_endpoint: "):
        check_endpoint(value)
    assert check_endpoint(None) == "https://huggingface.co"
    assert check_endpoint("http://10.99.9.1:8080/") == "http://10.99.9.1:8080"
