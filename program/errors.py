"""Specific exceptions with messages a user can act on."""

from __future__ import annotations


class SharpError(Exception):
    """Base class of every error this project raises on purpose."""


class ConfigError(SharpError, ValueError):
    """A configuration value or key is invalid."""


class QuestionError(SharpError, ValueError):
    """A question cannot be answered as given (empty, too long, ...)."""


class IndexMissingError(SharpError, FileNotFoundError):
    """No retrieval index exists where one was expected."""


class IndexMismatchError(SharpError):
    """An index was built with another embedding model or corpus than the one asked for."""


class IndexCorruptError(SharpError):
    """An index's files are damaged (truncated, changed, missing): the message names the file and the
    command that repairs the index."""


class IndexServerError(SharpError, ConnectionError):
    """The Chroma server that holds an index's vectors cannot be reached, or is not a Chroma server."""


class StorageError(SharpError, OSError):
    """A file or folder cannot be written (read-only, full disk, no permission): the message names it."""


class DiskFullError(StorageError):
    """The disk (or the user's quota) holding a file to write is full: the message names the path, the
    space left, and what to run once space is freed."""


class RetrievalError(SharpError):
    """A retriever failed to answer a query."""


class LMError(SharpError):
    """A language-model call failed."""


class LMTimeoutError(LMError, TimeoutError):
    """A language-model call ran past its timeout (after bounded retries)."""


class LMUnavailableError(LMError, ConnectionError):
    """The language-model endpoint cannot be reached."""


class LMProviderError(LMError):
    """The provider refused the call (rate limit, bad key, unknown model, ...)."""


class ModelFileError(SharpError):
    """A local model file is missing, incomplete or fails its checksum."""


class ProgramFileError(SharpError):
    """A saved program file is missing, tampered with, or does not match this code's version."""


class StoreError(SharpError):
    """A database or server that holds runs or studies cannot be reached or refused the credentials."""


class RunAbortedError(SharpError):
    """A run over many questions stopped because too many in a row failed (the answers so far are kept)."""


class SharpWarning(UserWarning):
    """Something the caller must know about a result that is still given (a question cut to the length
    limit, a calibrator fitted on another model's log-probabilities, threads that cannot be used)."""
