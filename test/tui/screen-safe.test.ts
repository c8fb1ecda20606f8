// The watch TUI prints what the daemon answers through ink, which writes raw text: stored escape sequences must
// arrive escaped, and URLs without their secrets (issue #12).
import { describe, expect, it } from 'vitest';
import { screenSafe } from '../../src/tui/snapshot.js';

describe('screenSafe', () => {
  it('escapes control characters and redacts URLs at any depth, leaving other values alone', () => {
    const v = screenSafe({ id: 'whk_1', url: 'http://127.0.0.1:9/\u001b]0;PWNED\u0007?token=S', n: 3, ok: true, list: ['\u001b[2J', null], deep: { e: 'a\r\nb' } });
    expect(v).toEqual({ id: 'whk_1', url: 'http://127.0.0.1:9/\\x1b]0;PWNED\\x07?***', n: 3, ok: true, list: ['\\x1b[2J', null], deep: { e: 'a\\r\\nb' } });
  });
});
