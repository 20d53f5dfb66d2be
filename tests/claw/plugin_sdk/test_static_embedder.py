"""The static embedder, its WordPiece tokeniser and the distillation that makes its table."""

from __future__ import annotations

import inspect
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from claw.plugin_sdk import EmbeddingProvider, InlineWorkerPool
from claw.plugin_sdk.search import StaticEmbedder, StaticTable, WordPiece, _distil

VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "the",
    "ship",
    "deploy",
    "prod",
    "##uction",
    "cat",
    "##s",
    "un",
    "##aff",
    "##able",
    ",",
    "!",
    "_",
    "cafe",
    "中",
    "文",
]


def test_wordpiece_cuts_words_as_bert_uncased_does() -> None:
    wp = WordPiece(VOCAB)

    def pieces(text: str) -> list[str]:
        return [VOCAB[i] for i in wp.ids(text)]

    assert pieces("The Production, cats!") == ["the", "prod", "##uction", ",", "cat", "##s", "!"]
    # Greedy longest match first inside a word; a word that cannot be cut is [UNK].
    assert pieces("unaffable") == ["un", "##aff", "##able"]
    assert pieces("dog") == ["[UNK]"]
    # Accents are stripped, underscores are punctuation, every CJK ideograph a word.
    assert pieces("Café ship_deploy 中文") == ["cafe", "ship", "_", "deploy", "中", "文"]
    assert wp.ids("") == []


def test_wordpiece_needs_an_unknown_token() -> None:
    with pytest.raises(ValueError, match="unknown token"):
        WordPiece(["a", "b"])


def _table(tmp_path: Path) -> StaticTable:
    rng = np.random.default_rng(7)
    rows = rng.normal(size=(len(VOCAB), 8)).astype(np.float32)
    rows[[VOCAB.index("prod"), VOCAB.index("##uction")]] = rows[VOCAB.index("ship")]
    rows[:4] = 0.0
    path = tmp_path / "t.npz"
    _distil.write_table(path, "tiny-8", VOCAB, rows, {"dims": 8})
    return StaticTable.load(path)


async def test_static_embedder_is_a_deterministic_normalised_provider(tmp_path: Path) -> None:
    table = _table(tmp_path)
    e = StaticEmbedder(table=table)
    assert isinstance(e, EmbeddingProvider)
    assert (e.id, e.model, e.dims) == ("claw-static", "tiny-8", 8)
    texts = ["ship the cats", "Production", "", "dog dog"]
    a = await e.embed(texts)
    b = await StaticEmbedder(workers=InlineWorkerPool(), table=table).embed(texts)
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32 and a.shape == (4, 8)
    np.testing.assert_allclose(np.linalg.norm(a[[0, 1]], axis=1), 1.0, rtol=1e-5)
    # A text with no token, or only unknown ones (a zero vector), matches nothing.
    assert not a[2].any() and not a[3].any()
    # "production" is cut into two pieces that lie where "ship" does.
    assert float(a[1] @ (await e.embed(["ship"]))[0]) == pytest.approx(1.0, abs=1e-2)


def test_a_text_is_embedded_alike_alone_and_in_a_large_batch(tmp_path: Path) -> None:
    e = StaticEmbedder(table=_table(tmp_path))
    many = ["ship the cats " * 50] * 2000 + ["cafe"]
    together = e.embed_sync(many)
    np.testing.assert_allclose(together[-1], e.embed_sync(["cafe"])[0], rtol=1e-6)
    np.testing.assert_allclose(together[0], together[1999], rtol=1e-6)


def test_a_table_of_another_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.npz"
    _distil.write_table(path, "x", VOCAB, np.zeros((len(VOCAB), 2), np.float32), {})
    import zipfile

    bad = tmp_path / "bad.npz"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.namelist():
            data = src.read(item)
            if item == "meta.json":
                data = json.dumps({"format": "other", "name": "x"}).encode()
            dst.writestr(item, data)
    with pytest.raises(ValueError, match="claw-static-embeddings/1"):
        StaticTable.load(bad)


def _tiny_bert(tmp_path: Path) -> Path:
    """A random two-layer BERT in the files distillation reads."""
    rng = np.random.default_rng(3)
    width, ffn, layers = 8, 16, 2
    tensors: dict[str, np.ndarray] = {
        "embeddings.word_embeddings.weight": rng.normal(size=(len(VOCAB), width)),
        "embeddings.position_embeddings.weight": rng.normal(size=(4, width)),
        "embeddings.token_type_embeddings.weight": rng.normal(size=(2, width)),
        "embeddings.LayerNorm.weight": np.ones(width),
        "embeddings.LayerNorm.bias": np.zeros(width),
    }
    for n in range(layers):
        p = f"encoder.layer.{n}."
        for name, shape in (
            ("attention.self.query", (width, width)),
            ("attention.self.key", (width, width)),
            ("attention.self.value", (width, width)),
            ("attention.output.dense", (width, width)),
            ("intermediate.dense", (ffn, width)),
            ("output.dense", (width, ffn)),
        ):
            tensors[p + name + ".weight"] = rng.normal(size=shape) * 0.3
            tensors[p + name + ".bias"] = np.zeros(shape[0])
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            tensors[p + norm + ".weight"] = np.ones(width)
            tensors[p + norm + ".bias"] = np.zeros(width)
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header).encode()
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    (model / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    (model / "config.json").write_text(
        json.dumps(
            {"num_attention_heads": 2, "num_hidden_layers": layers, "_name_or_path": "x/tiny"}
        )
    )
    return model


def test_distillation_is_deterministic_and_gives_a_loadable_table(tmp_path: Path) -> None:
    model = _tiny_bert(tmp_path)
    first, second = tmp_path / "a.npz", tmp_path / "b.npz"
    _distil.distil(model, first, dims=4)
    _distil.main([str(model), str(second), "--dims", "4"])
    assert first.read_bytes() == second.read_bytes()
    table = StaticTable.load(first)
    assert (table.name, table.dims) == ("static-tiny-4", 4)
    # Special tokens, punctuation and function words embed as nothing; other tokens as
    # something.
    for token in ("[CLS]", "the", ",", "!", "_"):
        assert not table.vectors[VOCAB.index(token)].any(), token
    assert table.vectors[VOCAB.index("ship")].any()
    # The table carries its common component, a unit vector, and no text keeps any of it.
    assert table.common.shape == (1, 4)
    assert float(np.linalg.norm(table.common)) == pytest.approx(1.0, abs=1e-6)
    vectors = StaticEmbedder(table=table).embed_sync(["ship the cats", "deploy prod", "cafe"])
    np.testing.assert_allclose(vectors @ table.common.T, 0.0, atol=1e-5)


def test_removing_the_common_component_parts_texts_that_only_share_it(tmp_path: Path) -> None:
    """Two texts whose vectors differ only off a shared direction are near alike with
    it, and far apart once it is removed."""
    rows = np.zeros((len(VOCAB), 3), np.float32)
    rows[VOCAB.index("ship")] = [3.0, 1.0, 0.0]
    rows[VOCAB.index("cat")] = [3.0, 0.0, 1.0]
    common = np.array([[1.0, 0.0, 0.0]], np.float32)
    plain, cleared = tmp_path / "plain.npz", tmp_path / "cleared.npz"
    _distil.write_table(plain, "p", VOCAB, rows, {})
    _distil.write_table(cleared, "c", VOCAB, rows, {}, common=common)
    for path, expected in ((plain, 0.9), (cleared, 0.0)):
        a, b = StaticEmbedder(table=StaticTable.load(path)).embed_sync(["ship", "cat"])
        assert float(a @ b) == pytest.approx(expected, abs=1e-2), path.name


def test_a_common_component_of_the_wrong_width_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.npz"
    rows = np.ones((len(VOCAB), 3), np.float32)
    _distil.write_table(path, "x", VOCAB, rows, {}, common=np.ones((1, 2), np.float32))
    with pytest.raises(ValueError, match="common component"):
        StaticTable.load(path)


WORDNET_NOUN = """\
  1 This software and database is being provided to you, the LICENSEE, by
  2 Princeton University under the following license.
00001740 03 n 02 ship 0 cat(p) 0 000 | a vessel; "the ship sails"; "cats deploy"
00001930 03 n 01 cafe 0 000 | a small place
"""


def test_wordnet_gives_words_with_their_definition_and_each_example(tmp_path: Path) -> None:
    (tmp_path / "data.noun").write_text(WORDNET_NOUN, encoding="utf-8")
    for name in ("data.verb", "data.adj", "data.adv"):
        (tmp_path / name).write_text("  1 licence only  \n", encoding="utf-8")
    texts = ["ship, cat: a vessel", "the ship sails", "cats deploy", "cafe: a small place"]
    assert _distil.wordnet_texts(tmp_path) == texts
    assert _distil.read_corpus(tmp_path) == texts
    lines = tmp_path / "lines.txt"
    lines.write_text("one text\n\n  another  \n", encoding="utf-8")
    assert _distil.read_corpus(lines) == ["one text", "another"]


@pytest.mark.parametrize("use_scipy", [True, False])
def test_a_mean_matrix_weighs_each_text_as_the_embedder_does(use_scipy: bool) -> None:
    weights = np.array([0.0, 1.0, 2.0, 1.0])
    a = _distil.MeanMatrix.of([[1, 2, 1, 0], [3]], weights, use_scipy=use_scipy)
    dense = np.array([[0.0, 0.5, 0.5, 0.0], [0.0, 0.0, 0.0, 1.0]])
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    np.testing.assert_allclose(a.dot(x), dense @ x, rtol=1e-6)
    y = np.array([[1.0, -1.0], [2.0, 0.5]], np.float32)
    np.testing.assert_allclose(a.tdot(y), dense.T @ y, rtol=1e-6)
    np.testing.assert_allclose(a.gram_diagonal(), (dense**2).sum(axis=0))


def test_fitted_rows_give_the_targets_and_unused_tokens_keep_their_prior() -> None:
    rng = np.random.default_rng(5)
    truth = rng.normal(size=(6, 3)).astype(np.float32)
    texts = [[1, 2], [2, 3], [1, 3], [4, 1], [4, 2, 3], [1], [2], [3], [4]]
    a = _distil.MeanMatrix.of(texts, np.ones(6))
    prior = rng.normal(size=(6, 3)).astype(np.float32)
    fitted = _distil.fit_rows(a, a.dot(truth), prior, ridge=1e-6, iterations=50)
    np.testing.assert_allclose(fitted[1:5], truth[1:5], atol=1e-3)
    np.testing.assert_array_equal(fitted[[0, 5]], prior[[0, 5]])


def test_distillation_fitted_to_a_corpus_is_deterministic(tmp_path: Path) -> None:
    model = _tiny_bert(tmp_path)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("ship the cats\ndeploy prod\ncafe ship\nunaffable cats\n", encoding="utf-8")
    plain, first, second = tmp_path / "p.npz", tmp_path / "a.npz", tmp_path / "b.npz"
    _distil.distil(model, plain, dims=4)
    _distil.distil(model, first, dims=4, corpus=[corpus])
    _distil.main([str(model), str(second), "--dims", "4", "--corpus", str(corpus)])
    assert first.read_bytes() == second.read_bytes()
    table, before = StaticTable.load(first), StaticTable.load(plain)
    assert table.meta["fit"].endswith("texts=4")
    assert not table.vectors[VOCAB.index("the")].any()
    assert not np.array_equal(table.vectors, before.vectors)


def test_the_shipped_table_has_the_width_the_documented_distillation_gives() -> None:
    """``claw/_data/static_minilm.npz`` is what ``_distil`` makes by default (the command
    in its docstring and the table's NOTICE): the width and name say so, and the
    embedder's vectors are that wide. A table re-made at another width without changing
    the default (or the other way round) fails here."""
    from claw.plugin_sdk.search._static_embedder import PACKAGED_TABLE

    table = StaticTable.load(PACKAGED_TABLE)
    width = inspect.signature(_distil.distil).parameters["dims"].default
    assert table.dims == width == table.meta["dims"] == 128
    assert table.name == f"static-all-MiniLM-L6-v2-{width}-2"
    assert f"--dims {width} --name {table.name}" in " ".join(str(_distil.__doc__).split())
    assert StaticEmbedder(table=table).embed_sync(["the production deploy"]).shape == (1, width)
