"""The Chinese meaning pipeline: `ChineseAnalyzer` (jieba segmentation and tags, cn2an numbers)
fills the same `Analysis` as the English one, and `ChineseGuard` compares two Chinese analyses.
See docs/chinese.md."""
