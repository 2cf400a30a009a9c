"""Placeholder: this family module is being written."""
