"""What simbatch knows about the world: model shapes (presets and Hugging Face configs),
accelerators, links, serving engines (their overheads and memory rules), and measured
operator profiles. Below the scenario: nothing here reads one.
"""
