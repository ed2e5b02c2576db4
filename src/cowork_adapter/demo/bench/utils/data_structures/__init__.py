"""Task configuration and dump layout."""
