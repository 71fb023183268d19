"""The data stages: ingest, clean, features, split and serialize, each a module of its own."""
