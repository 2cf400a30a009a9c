"""Secrets a user logs (a hub token, an API key, a password) are kept out of every tracker:
hyperparameters, sample columns and span tags under a key that names one are "<redacted>",
the key kept; the rule can take more keys and can be turned off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rlmetrics
from rlmetrics import ConfigurationError
from rlmetrics.backends.jsonl import read_jsonl, samples_path
from rlmetrics.redaction import REDACTED, Redaction, names_a_secret, redaction
from rlmetrics.testing import in_memory_tracing, span_records, wait_until

CONFIG = {
    "lr": 1e-6,
    "hub_token": "hf_abc",
    "token": "t",
    "wandb": {"api_key": "k1", "project": "grpo"},
    "WANDB_API_KEY": "k2",
    "db": {"password": {"nested": "p"}, "user": "me"},
    "client-secret": "s",
    "hub_token_unset": None,
    # Not secrets: a tokenizer's special tokens, counts, ids, a dataset's column.
    "tokenizer": {"pad_token": "<|endoftext|>", "eos_token": "</s>", "pad_token_id": 0},
    "max_new_tokens": 256,
    "num_key_value_heads": 8,
    "reward_key": "score",
    "average_tokens_across_devices": True,
}
REDACTED_CONFIG = {
    **CONFIG,
    "hub_token": REDACTED,
    "token": REDACTED,
    "wandb": {"api_key": REDACTED, "project": "grpo"},
    "WANDB_API_KEY": REDACTED,
    "db": {"password": REDACTED, "user": "me"},
    "client-secret": REDACTED,
}


def _jsonl(tmp_path: Path, **kwargs: Any) -> rlmetrics.Logger:
    return rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}}, **kwargs)


def _hyperparams(tmp_path: Path) -> dict[str, Any]:
    rows = read_jsonl(tmp_path / "m.jsonl", every_row=True)
    (row,) = [r for r in rows if r.get("kind") == "hyperparams"]
    return row["hyperparams"]  # type: ignore[no-any-return]


def test_secrets_in_a_config_are_redacted_and_every_key_kept(tmp_path: Path) -> None:
    logger = _jsonl(tmp_path)
    logger.log_hyperparams(CONFIG)
    logger.finish()
    assert _hyperparams(tmp_path) == REDACTED_CONFIG


def test_more_keys_can_be_redacted_and_the_rule_turned_off(tmp_path: Path) -> None:
    logger = _jsonl(tmp_path / "more", redact=["my_*", "Reward_Key"])
    logger.log_hyperparams({"my_credential": "c", "reward_key": "r", "hub_token": "h", "n": 1})
    logger.finish()
    assert _hyperparams(tmp_path / "more") == {
        "my_credential": REDACTED,
        "reward_key": REDACTED,
        "hub_token": REDACTED,
        "n": 1,
    }
    off = _jsonl(tmp_path / "off", redact=False)
    off.log_hyperparams(CONFIG)
    off.finish()
    assert _hyperparams(tmp_path / "off") == CONFIG


def test_the_configuration_file_sets_the_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rlmetrics.toml"
    path.write_text('[logger]\nredact = ["run_note"]\n')
    monkeypatch.setenv("RLMETRICS_CONFIG", str(path))
    logger = _jsonl(tmp_path)
    logger.log_hyperparams({"run_note": "x", "password": "p", "lr": 1})
    logger.finish()
    assert _hyperparams(tmp_path) == {"run_note": REDACTED, "password": REDACTED, "lr": 1}


@pytest.mark.parametrize("bad", ["password", [""], [3], 1])
def test_a_bad_setting_is_refused_with_what_to_write(bad: Any, tmp_path: Path) -> None:
    # A configuration mistake, as every other one is (docs/configuration.md): one exception
    # type to catch, its message naming the argument.
    with pytest.raises(ConfigurationError, match=r"Logger\(\): redact is True") as caught:
        _jsonl(tmp_path, redact=bad)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_sample_column_that_names_a_secret_is_redacted(tmp_path: Path) -> None:
    logger = _jsonl(tmp_path)
    logger.log_samples([{"prompt": "p", "completion": "c", "api_token": "t", "pad_token": "x"}], 1)
    logger.finish()
    path = samples_path(tmp_path / "m.jsonl")
    wait_until(path.exists, 10, "the samples file")
    (row,) = read_jsonl(path)
    assert row["sample"] == {
        "prompt": "p",
        "completion": "c",
        "api_token": REDACTED,
        "pad_token": "x",
    }


def test_a_secret_inside_a_sample_cell_s_dict_or_list_is_redacted(tmp_path: Path) -> None:
    # An agent's rollout row carries its environment's settings and its tool calls as they
    # are; a key naming a secret inside them is as secret as a column of that name.
    logger = _jsonl(tmp_path)
    logger.log_samples(
        [
            {
                "prompt": "p",
                "env": {"url": "http://sandbox", "api_key": "sk-live", "auth": {"token": "t1"}},
                "tool_calls": [{"name": "search", "args": {"hf_token": "hf_x", "q": "rl"}}],
            }
        ],
        1,
    )
    logger.finish()
    path = samples_path(tmp_path / "m.jsonl")
    wait_until(path.exists, 10, "the samples file")
    (row,) = read_jsonl(path)
    cells = f"{row['sample']['env']} {row['sample']['tool_calls']}"
    assert not any(secret in cells for secret in ("sk-live", "t1", "hf_x")), cells
    assert "http://sandbox" in cells and "'q': 'rl'" in cells and REDACTED in cells


def test_span_tags_that_name_a_secret_are_redacted() -> None:
    with in_memory_tracing() as (_handle, _reader, exporter):
        with (
            rlmetrics.step(1, tags={"hf_token": "hf_abc", "dataset": "gsm8k"}),
            rlmetrics.phase("generation", tags={"db_password": "p", "eos_token": "</s>"}),
        ):
            pass
        spans = {s.name: s.attributes for s in span_records(exporter)}
    (step,) = [a for a in spans.values() if "dataset" in a]
    (phase,) = [a for a in spans.values() if "eos_token" in a]
    assert step["hf_token"] == REDACTED and step["dataset"] == "gsm8k"
    assert phase["db_password"] == REDACTED and phase["eos_token"] == "</s>"


@pytest.mark.parametrize(
    "key", ["Authorization", "headers/authorization", "proxy_authorization", "Cookie", "set-cookie"]
)
def test_http_credentials_an_agent_s_request_carries_are_secrets(key: str) -> None:
    # A tool call's or an environment's request headers logged with a rollout: the
    # Authorization header holds the bearer token, a cookie the session.
    assert names_a_secret(key)


_words = st.sampled_from(["pad", "eos", "max", "new", "hub", "hf", "api", "key", "num", "id"])


@given(st.lists(_words, min_size=1, max_size=4))
def test_the_rule_is_case_and_separator_blind_and_ids_are_never_secrets(words: list[str]) -> None:
    key = "_".join(words)
    assert names_a_secret(key) == names_a_secret(key.upper().replace("_", "-"))
    assert not names_a_secret(f"{key}_id") and not names_a_secret(f"{key}_tokens")
    assert redaction(False).secret(key) is False
    assert Redaction(extra=(key,)).secret(f"outer/{key}")
