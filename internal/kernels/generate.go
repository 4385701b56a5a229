package kernels

//go:generate go run -C _asm . -kind matmul -out ../matmul_amd64.s -stubs ../matmul_stubs_amd64.go -pkg kernels
//go:generate go run -C _asm . -kind attention -out ../attention_amd64.s -stubs ../attention_stubs_amd64.go -pkg kernels
//go:generate go run -C _asm . -kind ops -out ../ops_amd64.s -stubs ../ops_stubs_amd64.go -pkg kernels
//go:generate go run -C _asm . -kind kquant -out ../kquant_amd64.s -stubs ../kquant_stubs_amd64.go -pkg kernels
//go:generate go run -C _asm . -kind legacy -out ../legacy_amd64.s -stubs ../legacy_stubs_amd64.go -pkg kernels
