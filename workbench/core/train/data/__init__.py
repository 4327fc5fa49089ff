"""What a run trains on: datasets, transforms, seeded resumable loaders, GPU image decoding and the preflight checks."""
