package pkg

func WithTestOnly() Option { return nil }
