"""Knowledge base: the kernel wiki (harnesses/knowledge/*.md), queried through tools.

Pages carry YAML front matter (id, title, tags, hardware, kernel_types, languages, symptoms) and
a provenance mark on every quantitative claim. `search_knowledge` ranks sections (BM25 over the
text, filtered by tag, symptom, hardware, kernel type or language, aliases resolved: "H200" is
hopper, "UMMA" is tcgen05); `read_knowledge` returns a page. The pages never enter the
workspace: what the agent looked up is exactly what the record lists.
"""
from __future__ import annotations

import functools
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ablate.models import ToolSpec
from ablate.sandbox import Tool, ToolResult
from ablate.harnesses.mechanisms._base import Mechanism

WIKI = Path(__file__).resolve().parent.parent / "knowledge"
FIELDS = ("tags", "hardware", "kernel_types", "languages", "symptoms")  # the filterable front-matter lists
FILTERS = {"tag": "tags", "hardware": "hardware", "kernel_type": "kernel_types", "language": "languages",
           "symptom": "symptoms"}
_WORD = re.compile(r"[a-z0-9][a-z0-9_.+-]*")


@dataclass
class Section:
    page: str  # page id
    heading: str
    text: str


@dataclass
class Page:
    id: str
    title: str
    path: str
    meta: dict[str, list[str]]
    body: str
    sections: list[Section] = field(default_factory=list)


def _front_matter(text: str, path: Path) -> tuple[dict[str, Any], str]:
    if not text.startswith("---\n"):
        raise ValueError(f"{path.name}: a wiki page starts with YAML front matter between '---' lines")
    head, _, body = text[4:].partition("\n---\n")
    return yaml.safe_load(head) or {}, body


def _sections(page_id: str, body: str) -> list[Section]:
    out, heading, lines, fence = [], "", [], False
    for line in body.splitlines():
        fence ^= line.startswith("```")
        if line.startswith("## ") and not fence:
            if "".join(lines).strip():
                out.append(Section(page_id, heading, "\n".join(lines).strip()))
            heading, lines = line[3:].strip(), []
        else:
            lines.append(line)
    if "".join(lines).strip():
        out.append(Section(page_id, heading, "\n".join(lines).strip()))
    return out


@functools.cache
def aliases() -> dict[str, str]:
    """Alternative names -> the vocabulary's canonical one (lower case)."""
    data = yaml.safe_load((WIKI / "aliases.yaml").read_text())
    return {str(k).lower(): str(v).lower() for k, v in data.items()}


def canonical(value: str) -> str:
    v = str(value).strip().lower()
    return aliases().get(v, v)


@functools.cache
def pages() -> dict[str, Page]:
    found = {}
    for path in sorted(WIKI.glob("*.md")):
        meta, body = _front_matter(path.read_text(), path)
        pid = str(meta.get("id") or path.stem)
        lists = {f: [canonical(v) for v in meta.get(f) or []] for f in FIELDS}
        page = Page(pid, str(meta.get("title", pid)), f"knowledge/{path.name}", lists, body)
        page.sections = _sections(pid, body)
        found[pid] = page
    return found


def _tokens(text: str) -> list[str]:
    """Words, aliases resolved; a compound ("memory-bound", "tl.dot") also counts as its parts."""
    out = []
    for word in _WORD.findall(text.lower()):
        word = word.strip(".-+")
        out.append(canonical(word))
        parts = [p for p in re.split(r"[-_.]", word) if p]
        if len(parts) > 1:
            out.extend(canonical(p) for p in parts)
    return out


@functools.cache
def _index() -> tuple[list[tuple[Section, Counter]], dict[str, int], float]:
    docs = []
    for page in pages().values():
        for s in page.sections:
            words = _tokens(" ".join([page.title, s.heading, s.heading, s.text] + sum(page.meta.values(), [])))
            docs.append((s, Counter(words)))
    df: Counter = Counter()
    for _, tf in docs:
        df.update(tf.keys())
    avg = sum(sum(tf.values()) for _, tf in docs) / max(len(docs), 1)
    return docs, dict(df), avg


def search(query: str = "", limit: int = 5, **filters: Any) -> list[tuple[Section, float]]:
    """Sections ranked by BM25 against the query, among pages matching every filter."""
    wanted = {}
    for arg, value in filters.items():
        if value in (None, "", []):
            continue
        if arg not in FILTERS:
            raise ValueError(f"unknown filter {arg!r}; valid: {', '.join(FILTERS)}")
        values = value if isinstance(value, (list, tuple)) else [value]
        wanted[FILTERS[arg]] = [canonical(v) for v in values]
    docs, df, avg = _index()
    n, k1, b = len(docs), 1.2, 0.75
    terms = _tokens(query)
    scored = []
    for order, (section, tf) in enumerate(docs):
        meta = pages()[section.page].meta
        if any(v not in meta[f] for f, vs in wanted.items() for v in vs):
            continue
        length = sum(tf.values())
        score = sum(math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) * tf[t] * (k1 + 1)
                    / (tf[t] + k1 * (1 - b + b * length / avg)) for t in terms if t in tf)
        if terms and score <= 0:
            continue
        if not terms:  # filters only: pages that list the value first (their main subject) lead
            score = sum(1.0 / (1 + meta[f].index(v)) for f, vs in wanted.items() for v in vs)
        scored.append((section, score, -order))
    scored.sort(key=lambda x: (x[1], x[2]), reverse=True)
    if not terms:  # filters only: one section per page, the page's first
        seen, firsts = set(), []
        for s, score, o in scored:
            if s.page not in seen:
                seen.add(s.page)
                firsts.append((s, score, o))
        scored = firsts
    return [(s, round(score, 3)) for s, score, _ in scored[:limit]]


@dataclass
class KnowledgeOptions:
    max_results: int = 5  # sections per search
    max_chars: int = 2500  # characters of each section's text shown in a search result


class Knowledge(Mechanism):
    name = "knowledge"
    Options = KnowledgeOptions
    prompt = "prompts/knowledge.md"
    documents = ("knowledge/*.md", "knowledge/*.yaml")

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.queries: list[dict[str, Any]] = []
        self.reads: list[str] = []

    def tools(self, task, ws, model):
        opts = self.options

        def search_knowledge(args):
            query = str(args.get("query") or "")
            filters = {f: args.get(f) for f in FILTERS if args.get(f)}
            limit = max(1, min(int(args.get("limit") or opts.max_results), 20))
            hits = search(query, limit, **filters)
            self.queries.append({"query": query, **filters, "hits": [f"{s.page}#{s.heading}" for s, _ in hits]})
            if not hits:
                return ToolResult("no matching sections; try fewer filters or other words. Tags in use: "
                                  + ", ".join(sorted({t for p in pages().values() for t in p.meta["tags"]})))
            out = [{"page": s.page, "title": pages()[s.page].title, "section": s.heading or "(introduction)", "score": score,
                    "tags": pages()[s.page].meta["tags"], "text": _cut(s.text, opts.max_chars)} for s, score in hits]
            return ToolResult(json.dumps(out, indent=1))

        def read_knowledge(args):
            pid = str(args.get("page") or "")
            if pid not in pages():
                return ToolResult(f"no page {pid!r}; pages: {', '.join(pages())}", is_error=True)
            self.reads.append(pid)
            page = pages()[pid]
            return ToolResult(f"# {page.title} ({page.id})\n" + page.body.strip())

        text = {"type": "string"}
        search_spec = ToolSpec(
            "search_knowledge", "Search the kernel knowledge base; returns ranked sections with their provenance marks.",
            {"type": "object", "properties": {
                "query": {"type": "string", "description": "free text, e.g. 'softmax long rows online'"},
                "tag": text, "symptom": {"type": "string", "description": "e.g. memory-bound, low-occupancy, launch-bound"},
                "hardware": {"type": "string", "description": "hopper, blackwell, or a GPU name (H100, H200, B200)"},
                "kernel_type": text, "language": text, "limit": {"type": "integer"}}, "required": []})
        read_spec = ToolSpec("read_knowledge", "Read one knowledge-base page in full, by its id.",
                             {"type": "object", "properties": {"page": text}, "required": ["page"]})
        return {"search_knowledge": Tool(search_spec, search_knowledge), "read_knowledge": Tool(read_spec, read_knowledge)}

    def use(self):
        found = [h.split("#")[0] for q in self.queries for h in q["hits"]]
        return {"queries": len(self.queries), "reads": len(self.reads), "pages_found": sorted(set(found)),
                "pages_read": sorted(set(self.reads)), "log": self.queries, "read_log": self.reads}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rsplit("\n", 1)[0] + "\n... [section continues; read_knowledge for the page]"


# -- the wiki's own rules (checked by the tests) ---------------------------------------------
MARK = re.compile(r"\[(measured|datasheet|source-reported|inferred)(?::\s*([^\]]+))?\]")
QUANTITY = re.compile(r"(?<![\w.])\d[\d.,]*\s?(?:TB/s|GB/s|TFLOP/s|PFLOP/s|FLOP per byte|ms|us|µs|ns|KB|MB|GB|%|x|SMs|"
                      r"registers|warps|blocks per SM)(?!\w)")
GPUS = ("H100", "H200", "H800", "B200", "GB200", "B100")


def claims(body: str) -> list[tuple[int, str]]:
    """(line number, text) of each claim unit: a paragraph, a list item or a table row, outside
    code blocks and headings, with inline code removed."""
    units: list[tuple[int, list[str]]] = []
    fence = False
    for n, line in enumerate(body.splitlines(), 1):
        if line.startswith("```"):
            fence = not fence
            units.append((n, []))
            continue
        text = re.sub(r"`[^`]*`", "", line).strip()
        if fence or not text or text.startswith("#") or text.startswith("|---"):
            units.append((n, []))
        elif text.startswith(("- ", "* ", "|")) or re.match(r"\d+\. ", text) or not units or not units[-1][1]:
            units.append((n, [text]))
        else:
            units[-1][1].append(text)
    return [(n, " ".join(lines)) for n, lines in units if lines]


def problems() -> list[str]:
    """Every violation of the wiki's rules: front matter in the vocabulary, ids matching file names,
    and a provenance mark on every claim that states a quantity (each paragraph, list item and table
    row), with a GPU, a dtype, a shape and the committed result file in every `measured` mark."""
    vocab = yaml.safe_load((WIKI / "vocabulary.yaml").read_text())
    out = []
    for path in sorted(WIKI.glob("*.md")):
        meta, body = _front_matter(path.read_text(), path)
        expected = "index" if path.stem == "README" else path.stem
        if meta.get("id") != expected:
            out.append(f"{path.name}: id {meta.get('id')!r} should be {expected!r}")
        for f in ("title",) + FIELDS:
            if f not in meta:
                out.append(f"{path.name}: front matter lacks {f!r}")
        for f in FIELDS:
            bad = [v for v in meta.get(f) or [] if v not in vocab[f]]
            if bad:
                out.append(f"{path.name}: {f} {bad} are not in vocabulary.yaml")
        for n, text in claims(body):
            marks = MARK.findall(text)
            if QUANTITY.search(MARK.sub("", text)) and not marks:
                out.append(f"{path.name}:{n}: a quantitative claim without a provenance mark: {text[:90]}")
            for kind, detail in marks:
                if kind == "measured":
                    parts = [p.strip() for p in detail.split(";")[0].split(",")]
                    if len(parts) < 3 or not any(g in parts[0] for g in GPUS):
                        out.append(f"{path.name}:{n}: a measured mark names GPU, dtype, shape: [{kind}: {detail}]")
                    if ";" not in detail:
                        out.append(f"{path.name}:{n}: a measured mark names its committed result file after ';'")
                elif kind in ("datasheet", "source-reported") and not detail:
                    out.append(f"{path.name}:{n}: a {kind} mark names its source")
    return out
