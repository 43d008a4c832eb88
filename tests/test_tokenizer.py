"""The BPE trainer against tiktoken's educational trainer; the shipped tokenizer's behaviour."""
import pytest
import tiktoken
from tiktoken import _educational

from minirl.lm import tokenizer
from minirl.lm.tokenizer import SPLIT_PATTERN, build_encoding, load_tokenizer, train_bpe

SMALL_TEXT = (
    "review: the plot was dull but the cast was very charming . "
    "q: 17+25= a: 42\nq: 99+1= a: 100\norder: hi , one large matcha latte with oat milk please .\n"
    "the the the theatre thesis, hello hello world! 12345 über naïve café 🙂 🙂"
)


def test_merges_equal_tiktoken_educational_trainer():
    ours = train_bpe(SMALL_TEXT, 300, SPLIT_PATTERN)
    reference = _educational.bpe_train(SMALL_TEXT, 300, SPLIT_PATTERN, visualise=None)
    assert ours == reference  # same tokens, same ranks, same order


@pytest.mark.parametrize("text", [
    "", "plain ascii", "q: 17+25= a: 42", "ünïcödé 日本語 🙂👍🏽 \t\n  trailing  ", "\x00\x01 control", "a" * 300,
])
def test_round_trip_on_arbitrary_text(text):
    enc = load_tokenizer()
    assert enc.decode(enc.encode(text)) == text


def test_round_trip_with_a_freshly_trained_encoding():
    enc = build_encoding(train_bpe(SMALL_TEXT, 280))
    text = "naïve 🙂 review: unseen words 987"
    assert enc.decode(enc.encode(text)) == text


def test_digits_are_single_tokens():
    enc = load_tokenizer()
    pieces = [enc.decode([t]) for t in enc.encode("q: 17+250= a: 1234")]
    assert all(sum(ch.isdigit() for ch in p) <= 1 for p in pieces), pieces
    assert "".join(pieces) == "q: 17+250= a: 1234"


def test_special_tokens_and_size():
    enc = load_tokenizer()
    assert isinstance(enc, tiktoken.Encoding)
    assert enc.eot_token == enc.encode_single_token(tokenizer.EOS)
    assert enc.encode_single_token(tokenizer.PAD) == enc.eot_token + 1
    assert enc.n_vocab <= tokenizer.VOCAB_SIZE
    with pytest.raises(ValueError):  # user text cannot smuggle in a special token
        enc.encode("hello <|endoftext|>")


def test_world_words_are_single_tokens():
    enc = load_tokenizer()
    for word in ["the", "plot", "charming", "matcha", "swim", "was"]:
        assert len(enc.encode(" " + word)) == 1, word


def test_vocab_size_below_bytes_is_an_error():
    with pytest.raises(ValueError, match="at least 256"):
        train_bpe("abc", 100)
