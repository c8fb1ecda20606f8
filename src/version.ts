export const VERSION = '0.1.0';
/** The git commit this build was made from (12 hex digits): `npm run build` writes it into dist/version.js (src/build/commit.ts). */
export const COMMIT: string = 'unknown';
