// A writer that bounds each log message, for loggers that print outside
// data draftd does not format itself: net/http's server ErrorLog, and the
// standard logger through which Go's HTTP transport reports, for example,
// bytes a server sent past its Content-Length (escaped, they made 10 KB
// lines). It is not a log handler.

package server

import (
	"io"
	"log"
	"log/slog"
	"strconv"
	"unicode/utf8"
)

// MaxLogLine is the most bytes of one message LimitLines passes on.
const MaxLogLine = 1024

type lineLimit struct{ w io.Writer }

// LimitLines returns a writer that passes each Write (a log package
// message) to w cut to MaxLogLine bytes, with its full length noted.
func LimitLines(w io.Writer) io.Writer { return lineLimit{w} }

func (l lineLimit) Write(p []byte) (int, error) {
	if len(p) <= MaxLogLine {
		return l.w.Write(p)
	}
	i := MaxLogLine
	for i > 0 && !utf8.RuneStart(p[i]) {
		i--
	}
	out := append(append([]byte(nil), p[:i]...), "… (message of "+strconv.Itoa(len(p))+" bytes cut)\n"...)
	if _, err := l.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// errorLog is a *log.Logger for net/http that writes bounded lines to h at
// level.
func errorLog(h slog.Handler, level slog.Level) *log.Logger {
	return log.New(LimitLines(slog.NewLogLogger(h, level).Writer()), "", 0)
}
