package tandem_test

import (
	"errors"
	"fmt"
)

var errPlain = errors.New("dial tcp 10.0.0.1:3306: secret")

func fmtErrorf(err error) error { return fmt.Errorf("layer: %w", err) }
