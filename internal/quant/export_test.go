package quant

// Prepare is the internal tests' prepare helper, for the external tests
// (krecipes_test.go, which builds its model with internal/testmodel).
var Prepare = prepare
