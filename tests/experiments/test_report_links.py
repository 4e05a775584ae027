"""Every link of the committed reproduction reports resolves: each figure file exists and each in-page
link names a claim's section (an empty "as [](#)" was written for claims without figures)."""

from __future__ import annotations

import glob
import os
import re

import pytest

from experiments.reproduce import report

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPORTS = sorted(glob.glob(os.path.join(REPO, "docs", "reproduction", "*", "report.md")))


@pytest.mark.parametrize("path", REPORTS, ids=[os.path.basename(os.path.dirname(p)) for p in REPORTS])
def test_every_figure_and_section_link_of_a_report_resolves(path):
  text = open(path).read()
  anchors = {report.anchor(h) for h in re.findall(r"^## (\S+)$", text, flags=re.M)}
  links = re.findall(r"(!?)\[([^\]]*)\]\(([^)]*)\)", text)
  assert links
  for bang, label, target in links:
    assert target, f"an empty link [{label}]()"
    if target.startswith("#"):
      assert target[1:] in anchors, f"[{label}]({target}) names no section"
    elif bang:
      assert os.path.isfile(os.path.join(os.path.dirname(path), target)), f"figure {target} is missing"
