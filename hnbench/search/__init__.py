"""Search: exact ranks (blocked, faiss), the backend calibration, approximate (HNSW / IVF) search."""
