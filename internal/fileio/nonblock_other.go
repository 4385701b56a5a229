// openRegular's flags where there is no non-blocking open.

//go:build !unix

package fileio

import "os"

const oNonblock = 0

func clearNonblock(*os.File) error { return nil }
