package main

import (
	"errors"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/convert"
)

// destError is a destination refusal said without the library's class in
// front ("destination holds a different conversion" is wrong for a DST that
// holds unrelated files) and with what to do. It still matches
// convert.ErrDestination.
type destError struct {
	msg string
	err error
}

func (e *destError) Error() string { return e.msg }
func (e *destError) Unwrap() error { return e.err }

// withDestHint rewords a convert.ErrDestination refusal of the command line
// args for the user: what DST holds and the ways on.
func withDestHint(err error, args []string) error {
	if !errors.Is(err, convert.ErrDestination) {
		return err
	}
	msg := strings.Replace(err.Error(), convert.ErrDestination.Error()+": ", "", 1)
	restart := slices.Contains(args, "--restart") || slices.Contains(args, "--restart=true")
	switch {
	case strings.Contains(msg, " is converting plan "):
		msg += "\nits run is unfinished: to finish it, rerun the command that started it (its recipe and flags above);"
		if restart {
			msg += "\n--restart starts over only a run of the same plan;"
		}
		msg += "\nto give it up, delete that directory, or convert into another one"
	case strings.Contains(msg, " holds a finished conversion "):
		msg += "\nto replace it, delete that directory first, or convert into another one"
	case strings.Contains(msg, " holds no k3ckpt conversion"):
		msg += "\nconvert writes only into an empty or new directory, or one of its own runs: choose another, or empty this one"
	}
	return &destError{msg: msg, err: err}
}
