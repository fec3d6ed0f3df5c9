"""The reader's shared parts, used by every system: evidence formatting, the reader call and
its confidence, parsing and cleaning the replies."""
