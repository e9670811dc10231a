"""Example graphs bundled with flowc (`mlp.flowc`; regenerate with
`python -m flowc.examples.make_mlp`)."""
