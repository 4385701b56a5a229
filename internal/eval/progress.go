// This file is the console side shared by `draftd eval` and `draftd bench`:
// a progress bar on stderr and the JSON report writer. It measures nothing.

package eval

import (
	"encoding/json"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Progress is a progress bar on stderr, or nothing when stderr is not a
// terminal (so logs and CI output stay clean). The zero value draws nothing.
type Progress struct {
	bar *progressbar.ProgressBar
}

// NewProgress starts a bar counting to total.
func NewProgress(total int, desc string) Progress {
	if total <= 0 || !term.IsTerminal(int(os.Stderr.Fd())) {
		return Progress{}
	}
	return Progress{bar: progressbar.NewOptions(total,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionFullWidth(),
		progressbar.OptionClearOnFinish(),
	)}
}

// Add advances the bar by n; it is safe for concurrent use.
func (p Progress) Add(n int) {
	if p.bar != nil {
		_ = p.bar.Add(n)
	}
}

// Done finishes and clears the bar.
func (p Progress) Done() {
	if p.bar != nil {
		_ = p.bar.Finish()
		_ = p.bar.Clear()
	}
}

// WriteJSON writes v as indented JSON to path.
func WriteJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
