"""Pages: ``hnbench browse``'s static HTML page of one result's failures (:mod:`hnbench.pages.build`, rendered by
:mod:`hnbench.pages.html`), the leaderboard's HTML board (:mod:`hnbench.pages.board`), their shared look
(:mod:`hnbench.pages.theme`), the word diff (:mod:`hnbench.pages.textdiff`) and ``hnbench site``, a static site of
all of them (:mod:`hnbench.pages.site`).

The browse page is built from stored files only: the result's per-query parquet gives ranks and the top retrieved
ids; the dataset is re-loaded (never encoded) for captions and image thumbnails. It is one file that opens from disk:
thumbnails are embedded as base64 JPEG, sorting and filtering are a few lines of plain JavaScript.
"""
