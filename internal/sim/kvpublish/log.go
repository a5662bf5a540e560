package kvpublish

import (
	"io"
	"log"
)

// discardLogger silences zmq4's own logger: it prints reconnect chatter with the standard logger,
// and the publisher already logs what matters through slog.
func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }
