"""nbgrader's collect, with links never followed (what `python -m autograder.apps.exchange collect` runs).

nbgrader's own collect copies an inbound/ entry with `shutil.copytree`, reading through every link
a student wrote there as the instructor (often root). Here an entry is taken only when
`autograder.one_notebook` accepts it (the rule: CONTRIBUTING.md, "A submission is its notebook"),
and each file is copied from a descriptor opened with O_NOFOLLOW, so a link swapped in after the
check is refused, not read. Any other entry stays where it is, named in `SafeCollect.refused`
(the exchange's report prints it).

    c.ExchangeFactory.collect = "autograder.plugins.safe_collect.SafeCollect"   # exchange.py sets it
"""
from __future__ import annotations

import os
from pathlib import Path

from nbgrader.exchange.default.collect import ExchangeCollect

from autograder import one_notebook


class SafeCollect(ExchangeCollect):
    refused: list = []   # "student/drop: why", for each entry left out by the last collect
    src_records: list[dict]   # nbgrader's: the inbound entries init_src found

    def init_src(self) -> None:
        super().init_src()
        SafeCollect.refused = []
        notebooks = one_notebook.notebooks_of(Path(self.coursedir.root), self.coursedir.assignment_id)
        kept = []
        for record in self.src_records:
            why = (one_notebook.refusal(Path(self.inbound_path) / record["filename"], notebooks)
                   if one_notebook.NAME.fullmatch(record["username"]) else
                   f"{record['username']!r} is not a student id (it would name a folder outside submitted/)")
            if why:
                SafeCollect.refused.append(f"{record['username']}/{self.coursedir.assignment_id}: "
                                           f"the exchange's inbound/{record['filename']}: {why}")
                self.log.warning("not collected: %s", SafeCollect.refused[-1])
            else:
                kept.append(record)
        self.src_records = kept

    def do_copy(self, src: str, dest: str, log: object = None) -> None:
        """The checked entry's regular files, read without following a link."""
        notebooks = one_notebook.notebooks_of(Path(self.coursedir.root), self.coursedir.assignment_id)
        why = one_notebook.refusal(Path(src), notebooks)
        if why:
            raise RuntimeError(f"{src}: {why}")
        os.makedirs(dest)
        for name in sorted(notebooks | one_notebook.NBGRADER_FILES):
            try:
                data = one_notebook.read_regular(Path(src) / name)
            except FileNotFoundError:
                continue
            with open(os.path.join(dest, name), "xb") as f:
                f.write(data)
