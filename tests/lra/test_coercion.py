"""The one conversion of string / YAML values to typed ones, shared by config fields and attention
options (lra.coercion)."""
from __future__ import annotations

from typing import Literal, Optional

import pytest

from lra import attention as registry
from lra.coercion import coerce, type_name
from lra.config import resolve


@pytest.mark.parametrize("text", ["true", "YES", "y", "on", "1", 1, True])
def test_true_words(text):
    assert coerce(text, bool, "k") is True


@pytest.mark.parametrize("text", ["false", "No", "n", "off", "0", 0, False])
def test_false_words(text):
    assert coerce(text, bool, "k") is False


def test_bools_refuse_other_values():
    with pytest.raises(ValueError, match="^k: expected true or false, got 'maybe'$"):
        coerce("maybe", bool, "k")
    with pytest.raises(ValueError, match="k: expected true or false, got 2"):
        coerce(2, bool, "k")


def test_ints():
    assert coerce("1_000", int, "k") == 1000
    assert coerce(" 1e3 ", int, "k") == 1000
    assert coerce(4.0, int, "k") == 4 and isinstance(coerce(4.0, int, "k"), int)
    for bad in (True, "2.5", 2.5, "many", "inf", None):
        with pytest.raises(ValueError, match="^k: expected an integer, got "):
            coerce(bad, int, "k")


def test_floats():
    assert coerce(3, float, "k") == 3.0 and isinstance(coerce(3, float, "k"), float)
    assert coerce(" 3e-4", float, "k") == 3e-4
    for bad in (False, "lots", None):
        with pytest.raises(ValueError, match="^k: expected a number, got "):
            coerce(bad, float, "k")


def test_strings_and_literals():
    assert coerce(64, str, "k") == "64"
    with pytest.raises(ValueError, match="k: expected a string, got True"):
        coerce(True, str, "k")
    assert coerce(" b", Literal["a", "b"], "k") == "b"
    assert coerce("2", Literal[1, 2], "k") == 2
    with pytest.raises(ValueError, match=r"^k: expected one of 'cosine', 'linear', got 'cosin'; did you mean 'cosine'\?$"):
        coerce("cosin", Literal["cosine", "linear"], "k")


def test_none_words_for_optional_types():
    for word in ("none", "Null", "~", "auto", "", None):
        assert coerce(word, Optional[int], "k") is None
    assert coerce("5", Optional[int], "k") == 5
    # a word that is a choice of the type is that choice, not None
    assert coerce("auto", Optional[Literal["auto", "flash"]], "k") == "auto"
    with pytest.raises(ValueError, match="^k: expected an integer or none, got 'x'$"):
        coerce("x", Optional[int], "k")
    with pytest.raises(ValueError, match="k: expected an integer, got 'none'"):
        coerce("none", int, "k")  # not optional: none is no integer


def test_unions_take_the_first_member_that_fits():
    assert coerce("3", int | str, "k") == 3
    assert coerce("three", int | str, "k") == "three"


def test_lists_and_tuples():
    assert coerce("1, 2,3", list[int], "k") == [1, 2, 3]
    assert coerce("[1,2]", list[int], "k") == [1, 2]
    assert coerce("", list[int], "k") == []
    assert coerce([1.0, "2"], tuple[float, ...], "k") == (1.0, 2.0)
    with pytest.raises(ValueError, match=r"^k\[1\]: expected an integer, got 'x'$"):
        coerce("1,x", list[int], "k")
    with pytest.raises(ValueError, match="k: expected a list of an integer, got 3"):
        coerce(3, list[int], "k")


def test_mappings_and_unsupported_types():
    assert coerce({"a": 1}, dict, "k") == {"a": 1}
    with pytest.raises(ValueError, match="k: expected a mapping, got 'a=1'"):
        coerce("a=1", dict, "k")
    with pytest.raises(TypeError, match="k: no conversion to"):
        coerce("1", complex, "k")


def test_type_names():
    assert type_name(Optional[int]) == "int | None"
    assert type_name(Literal["a", "b"]) == "{'a', 'b'}"
    assert type_name(list[int]) == "list[int]"


def test_configs_and_attention_options_follow_the_same_rules():
    """The same words mean the same values in a config override and in an attention option."""
    config = resolve("listops", "performer", preset="smoke",
                     overrides=["train.compile=y", "train.limit_val_batches=null", "attention.eps=null",
                                "attention.nb_features=1_024"])
    assert config.train.compile is True and config.train.limit_val_batches is None
    assert config.attention_options["eps"] is None and config.attention_options["nb_features"] == 1024
    assert registry.resolve_options("flash_sparse", layout="local", window="auto")["window"] is None
    with pytest.raises(ValueError, match="train.max_steps: expected an integer, got 'x'"):
        resolve("listops", "softmax", preset="smoke", overrides=["train.max_steps=x"])
    with pytest.raises(ValueError, match="attention 'performer' option 'nb_features': expected an integer, got 'x'"):
        resolve("listops", "performer", preset="smoke", overrides=["attention.nb_features=x"])
