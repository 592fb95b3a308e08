"""The kernel wiki: its own rules (vocabulary, a provenance mark on every quantitative claim),
its coverage (Hopper and Blackwell, the operators' kernel types, the kernel languages), its
search, and what the knowledge mechanism adds and records."""
import json
import re
from pathlib import Path

import pytest

from ablate import harnesses
from ablate import operators
from ablate.harnesses import Budget
from ablate.harnesses.mechanisms import knowledge as kb

ROOT = Path(__file__).resolve().parents[2]


def test_the_wiki_keeps_its_rules():
    assert kb.problems() == []


def test_the_rules_catch_an_unmarked_claim_a_bad_measured_mark_and_an_unknown_tag(tmp_path, monkeypatch):
    for f in ("vocabulary.yaml", "aliases.yaml"):
        (tmp_path / f).write_text((kb.WIKI / f).read_text())
    (tmp_path / "bad.md").write_text(
        "---\nid: bad\ntitle: Bad\ntags: [gemm, nonsense]\nhardware: [hopper]\nkernel_types: [gemm]\n"
        "languages: [triton]\nsymptoms: []\n---\n# Bad\n\n## Claims\n\nThis GEMM reaches 700 TFLOP/s on an H200.\n\n"
        "- Copies run at 4.2 TB/s. [measured: H200]\n- Launches cost 5 us. [inferred]\n\n"
        "```python\nx = 128  # 128 KB in a code block is not a claim\n```\n")
    monkeypatch.setattr(kb, "WIKI", tmp_path)
    found = kb.problems()
    assert any("nonsense" in p for p in found)
    assert any("without a provenance mark: This GEMM reaches 700 TFLOP/s" in p for p in found)
    assert any("names GPU, dtype, shape" in p for p in found)
    assert not any("Launches cost" in p or "128 KB" in p for p in found)


def test_measured_claims_cite_committed_result_files():
    cited = set()
    for page in kb.pages().values():
        for _, text in kb.claims(page.body):
            cited |= {detail.split(";", 1)[1].strip() for kind, detail in kb.MARK.findall(text) if kind == "measured"}
    assert cited, "the wiki has measured claims"
    for rel in cited:
        assert (ROOT / rel).is_file(), f"{rel} is cited as a measurement but is not in the repository"


def test_coverage_hopper_blackwell_kernel_types_languages():
    pages = kb.pages()
    hardware = {h for p in pages.values() for h in p.meta["hardware"]}
    assert {"hopper", "blackwell"} <= hardware
    assert "hopper" in pages and "blackwell" in pages
    types = {t for p in pages.values() for t in p.meta["kernel_types"]}
    for needed in ("row-reduction", "softmax", "cross-entropy", "elementwise", "rope", "swiglu", "gemm",
                   "grouped-gemm", "attention", "topk"):
        assert needed in types, needed
    assert {"triton", "cuda"} <= {lang for p in pages.values() for lang in p.meta["languages"]}
    assert {"techniques", "pitfalls", "diagnosis", "profiling"} <= set(pages)
    assert len(operators.REGISTRY) == 10  # the ten operators the kernel types above cover
    marks = {k for p in kb.WIKI.glob("*.md") for k, _ in kb.MARK.findall(p.read_text())}
    assert marks == {"measured", "datasheet", "source-reported", "inferred"}


@pytest.mark.parametrize("args,page", [
    ({"query": "tensor memory tcgen05"}, "blackwell"),
    ({"query": "wgmma TMA", "hardware": "H200"}, "hopper"),  # a GPU name resolves to its architecture
    ({"query": "UMMA accumulator", "hardware": "blackwell"}, "gemm"),  # an alias of tcgen05: "Blackwell specifics"
    ({"symptom": "tail-effect", "query": "waves SMs"}, "techniques"),
    ({"kernel_type": "topk"}, "topk"),
    ({"query": "rmsnorm starting configurations num warps"}, "row-reductions"),
    ({"query": "ERR_NVGPUCTRPERM counters permission"}, "profiling"),
])
def test_search_ranks_the_right_page_first(args, page):
    query = args.pop("query", "")
    hits = kb.search(query, 5, **args)
    assert hits and hits[0][0].page == page, [(s.page, s.heading) for s, _ in hits]


def test_filters_restrict_and_unknown_filters_are_errors():
    assert all("blackwell" in kb.pages()[s.page].meta["hardware"] for s, _ in kb.search("gemm", 20, hardware="B200"))
    assert kb.search("", 5, tag="no-such-tag") == []
    with pytest.raises(ValueError, match="valid: tag, hardware"):
        kb.search("x", 5, colour="red")


def test_the_tools_return_sections_with_provenance_and_record_every_query(ws, h):
    harness = harnesses.build({"name": "k", "mechanisms": {"knowledge": {"max_results": 2}}})
    calls = [("search_knowledge", {"query": "softmax long rows", "kernel_type": "softmax"}),
             ("read_knowledge", {"page": "hopper"}), ("read_knowledge", {"page": "nope"}), h.WRITE, ("submit", {})]
    r = harness.run(h.Playback(calls), h.make_task(), ws, Budget(turns=8))
    out = h.tool_results(r)
    hits = json.loads(out[0].content)
    assert len(hits) == 2 and hits[0]["page"] == "row-reductions" and hits[0]["section"] == "Softmax"
    assert re.search(r"\[(measured|inferred|datasheet|source-reported)", hits[0]["text"])
    assert "H200 SXM" in out[1].content and out[2].is_error and "pages: index" in out[2].content
    use = r.mechanisms["knowledge"]
    assert use["queries"] == 1 and use["pages_found"] == ["row-reductions"] and use["pages_read"] == ["hopper"]
    assert use["log"][0]["kernel_type"] == "softmax" and use["log"][0]["hits"][0] == "row-reductions#Softmax"
    assert not (ws.path / "wiki").exists()  # pages come through the tools only
    assert r.spent["knowledge"].tool_calls == 3
