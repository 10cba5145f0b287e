"""Plain-text tables for the command line (`conveyor pipelines`, `stats`, `top`)."""


def table(headers, rows, left=(0,)):
    """Lines of a table: columns whose index is in `left` left-aligned, the
    others right-aligned; a dashed rule under the headers."""
    cols = [list(headers)] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cols) for i in range(len(headers))]
    out = []
    for r in cols:
        cells = [c.ljust(w) if i in left else c.rjust(w)
                 for i, (c, w) in enumerate(zip(r, widths))]
        out.append("  ".join(cells).rstrip())
    out.insert(1, "  ".join(("-" if h else " ") * w for h, w in zip(headers, widths)).rstrip())
    return out
