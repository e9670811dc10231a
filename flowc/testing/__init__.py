"""Test-support code shipped with flowc: the random-graph generator of the differential
tests (`graphgen`), its ONNX export (`onnx_export`) and the differential runner (`diff`)."""
