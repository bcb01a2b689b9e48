"""Views of outcomes for people and tools: terminal, JSON, Markdown, PNG."""
