"""specops: speculative-decoding experiments on GPU hosts, step by verified step."""

__version__ = "0.1.0"
