// Parsing token-id lists from the command line and from files. Shared by the
// subcommands that take ids; not a subcommand itself.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// parseIDs reads "1,2,3", "1 2 3" or a JSON array "[1,2,3]".
func parseIDs(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") {
		var ids []int
		if err := json.Unmarshal([]byte(s), &ids); err != nil {
			return nil, fmt.Errorf("token ids: %w", err)
		}
		return ids, nil
	}
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' || r == '\r' })
	ids := make([]int, 0, len(fields))
	for _, f := range fields {
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("token id %q is not an integer", f)
		}
		ids = append(ids, v)
	}
	return ids, nil
}

// readIDsFile reads a file of ids in any form parseIDs accepts.
func readIDsFile(path string) ([]int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ids, err := parseIDs(string(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ids, nil
}
