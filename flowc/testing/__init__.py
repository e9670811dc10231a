"""Test-support code shipped with flowc: the random-graph generator of the differential
tests (`graphgen`), its ONNX export (`onnx_export`), the differential runner (`diff`), and
the hostile-model generators (`hostile`, `hostile_struct`, `hostile_files`) with their
isolated runner (`hostile_run`)."""
