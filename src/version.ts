/** nodelet's version: `nodelet --version`, the User-Agent, and the Node's kubeletVersion suffix. Kept equal to package.json's. */
export const VERSION = '0.1.0';
