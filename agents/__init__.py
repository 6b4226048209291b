"""Example agents to copy from: a research team (a lead, researchers, a library tool actor) and its demo."""
