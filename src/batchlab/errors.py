"""The one exception type batchlab raises for bad input.

Every check of user input (files, flags, API arguments) raises `InputError` before any state
changes, with a message that names the field and, where there is one, the record.
"""


class InputError(ValueError):
    """Bad input: the message names the field and the record at fault."""


def where(record: int | str | None, field: str) -> str:
    """`record 3 field 'arrival'`, the prefix every validation message starts with."""
    if record is None:
        return f"field '{field}'"
    return f"record {record}: field '{field}'"
