"""The one writer of a graph's image: .svg as given, .png rendered; atomic; the Graph tab's Export goes through it."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QImage

from workbench.ui.graph import image_file

SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="120" height="80">'
       '<rect x="10" y="10" width="100" height="60" fill="#4060c0"/><text x="20" y="45">conv1</text></svg>')


def test_svg_is_written_as_given_and_png_rendered_at_its_size(tmp_path, qapp):
    svg = image_file.write_graph_image(tmp_path / "g.svg", SVG)
    assert svg == tmp_path / "g.svg" and svg.read_text() == SVG
    png = image_file.write_graph_image(tmp_path / "g.PNG", SVG, scale=2.0)
    image = QImage(str(png))
    assert (image.width(), image.height()) == (240, 160)
    assert image.pixelColor(200, 40).name() == "#4060c0" and image.pixelColor(2, 2).name() == "#ffffff"
    small = QImage(str(image_file.write_graph_image(tmp_path / "s.png", SVG, scale=2.0, max_side=60)))
    assert (small.width(), small.height()) == (60, 40)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.PNG", "g.svg", "s.png"]


def test_a_failing_write_leaves_the_previous_file_and_no_partial_one(tmp_path, qapp, monkeypatch):
    (tmp_path / "g.png").write_bytes(b"before")
    with pytest.raises(ValueError, match="could not be rendered"):
        image_file.write_graph_image(tmp_path / "g.png", "<not svg")
    with pytest.raises(ValueError, match="export as .svg or .png"):
        image_file.write_graph_image(tmp_path / "g.txt", SVG)

    def refuse(src, dst):
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr("workbench.core.files.os.replace", refuse)
    for name in ("g.png", "g.svg"):
        with pytest.raises(OSError, match="No space left"):
            image_file.write_graph_image(tmp_path / name, SVG)
    assert [p.name for p in tmp_path.iterdir()] == ["g.png"] and (tmp_path / "g.png").read_bytes() == b"before"


@pytest.mark.usefixtures("no_dangling_qthreads")
def test_the_graph_tabs_export_writes_through_it(main_window, qtbot, tmp_path, monkeypatch):
    win, _ = main_window
    win.graph_dock.raise_()
    panel = win.graph_panel
    qtbot.waitUntil(lambda: panel.graph is not None, timeout=60_000)
    written = []
    real = image_file.write_graph_image
    monkeypatch.setattr(image_file, "write_graph_image",
                        lambda path, svg, **kw: written.append((str(path), kw)) or real(path, svg, **kw))
    svg, png = panel.export(str(tmp_path / "g.svg")), panel.export(str(tmp_path / "g.png"))
    assert [p for p, _ in written] == [svg, png] and written[1][1] == {"scale": 2.0, "max_side": 8000}
    assert "<svg" in open(svg).read() and QImage(png).width() > 100
    with pytest.raises(ValueError):
        panel.export(str(tmp_path / "g.txt"))
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
