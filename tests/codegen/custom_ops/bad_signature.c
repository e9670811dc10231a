/* swish with the wrong signature: a test of flowc's check */
void swish(float *x, int n) {
  for (int i = 0; i < n; i++) x[i] = 0;
}
