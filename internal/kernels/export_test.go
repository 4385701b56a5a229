// Test-only exports for the kernels_test benchmarks (the model-level ones).
package kernels

// ProcessCPU is processCPU for the external benchmarks.
var ProcessCPU = processCPU
