package pkg

type Option func()

func WithA() Option { return nil }

func WithB(int) Option { return nil }

func withHidden() Option { return nil }

func Pair() (Option, error) { return nil, nil }

func Other() int { return 0 }

type T struct{}

func (T) WithMethod() Option { return nil }
