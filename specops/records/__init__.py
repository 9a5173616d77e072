"""A run's records and their files, below measuring, deciding and reporting: the per-point
`ResultRecord` (schema), manifest.json (manifest) and the run directory (store). Nothing
here imports bench/, decide/ or report/; they all read and write runs through it."""
