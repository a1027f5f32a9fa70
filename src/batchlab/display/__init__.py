"""Text displays for people: rich tables and ASCII timelines."""

WIDE = 160  # tables are wide: when printing to a file or pipe, do not wrap them at 80 columns


def console(stderr: bool = False):
    """A rich Console for tables: the terminal's width, or WIDE when output is not a terminal.
    No emoji codes: an id or a name such as ':x:' prints as given."""
    from rich.console import Console

    probe = Console(stderr=stderr, emoji=False)
    return probe if probe.is_terminal else Console(stderr=stderr, width=WIDE, emoji=False)
