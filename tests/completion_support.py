"""What the completion tests share: a long document whose cursor is deep inside a long definition."""

LONG_DOC = (
    "def helper():\n    return 1\n\n\n" * 30
    + "class Report:\n    def setup(self):\n"
    + "".join(f"        self.column_{i} = {i}\n" for i in range(20))
    + '''
    def render(self, rows):
        """Render the rows.

        Each row is a mapping of column to value."""
        out = []
'''
    + "".join(f"        out.append(rows[{i}])\n" for i in range(12))
    + "        <|>\n"
)
