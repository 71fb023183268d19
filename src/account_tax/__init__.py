"""account-tax: raw accounting records to a fine-tuned classifier of account codes."""

__version__ = "0.1.0"
