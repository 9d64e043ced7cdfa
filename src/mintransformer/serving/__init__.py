"""Serving a trained run: a JSON API, a web page to explore attention, batching under load.

`mintransformer serve --run DIR` starts one process (`app.serve`) that loads the run
once, keeps it warm, and serves

- the JSON API (`app.create_app`; FastAPI, so `/docs` documents it),
- the web page at `/` (`static/`, shipped inside the package: it needs no network),
- with translation requests that arrive together decoded together (`batching`), their
  sources padded to a few fixed widths so a bounded number of shapes is compiled
  (`buckets`).

Every request is checked against `limits.Limits` first: bad input gets a 4xx with a
JSON message naming the problem, never a 500.
"""
