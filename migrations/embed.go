// Package migrations holds the versioned SQL schema of the stock service,
// applied by goose from this embedded file system.
package migrations

import "embed"

// FS holds the goose migrations, named NNNNN_description.sql.
//
//go:embed *.sql
var FS embed.FS
