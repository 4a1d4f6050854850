"""The documentation's pages (Markdown) and the script that draws their pictures: `python -m docs.make`."""
