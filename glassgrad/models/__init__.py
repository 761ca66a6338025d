"""Real models written with glassgrad: a BERT sentence encoder (bert.py, wordpiece.py) and a GPT-2 decoder (gpt2.py)."""
