package borrowed

import "github.com/panjf2000/gnet/v2"

type conn struct {
	gc   gnet.Conn
	head []byte
}

func (c *conn) onTraffic() {
	c.head, _ = c.gc.Peek(-1) // want `R3: gnet's Peek lends its buffer`
	buf, _ := c.gc.Next(-1)
	c.head = append(c.head[:0], buf...) // a copy: fine
}
