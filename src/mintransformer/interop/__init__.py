"""Converters between our runs and other formats (Hugging Face `transformers`), kept
apart from the models: they import runs/, models/, data/ and config; only the command
line imports them."""
